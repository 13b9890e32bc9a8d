"""tools/torch_suite (issue 20's measurement harness): its scope rule and source rewrite, checked on a small
synthetic test file written here, so the rule code cannot rot silently.  No PyTorch sources are needed; nothing
here runs pytest or imports jitgrad."""
import importlib.util
import os
import textwrap

import pytest

TOOL = os.path.join(os.path.dirname(os.path.dirname(os.path.abspath(__file__))), "tools", "torch_suite")


def _load(name):
    spec = importlib.util.spec_from_file_location(f"torch_suite_{name}", os.path.join(TOOL, f"{name}.py"))
    mod = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(mod)
    return mod


scope = _load("scope")

# A stand-in for PyTorch's test file: each test is shaped like one the rule must classify.
TOY = textwrap.dedent('''
    import unittest
    import torch
    import torch.autograd.forward_ad as fwAD
    from torch.testing._internal.common_utils import TestCase, TEST_CUDA, parametrize, skipIfMPS

    DTYPES = [torch.float64]

    def make_on_accelerator():
        return torch.ones(1).cuda()

    def make_plain():
        return torch.ones(1)

    class TestToy(TestCase):
        def _dual_helper(self, x):
            with fwAD.dual_level():
                return fwAD.make_dual(x, x)

        def test_plain(self):
            x = torch.ones(2, requires_grad=True)
            x.sum().backward()

        def test_forward_mode(self):
            with fwAD.dual_level():
                pass

        def test_needs_cuda(self):
            torch.ones(1, device="cuda").sum()

        def test_cpu_branch_kept(self):
            if TEST_CUDA:
                y = torch.ones(1).cuda()
            else:
                y = torch.ones(1)

        @skipIfMPS
        def test_skip_on_mps_only(self):
            make_plain()

        def test_calls_dual_helper(self):
            self._dual_helper(torch.ones(1))

        def test_calls_device_function(self):
            make_on_accelerator()

        def test_calls_plain_function(self):
            make_plain()

        @unittest.skip("torch skips this")
        def test_skipped_by_torch(self):
            pass

        @parametrize("dtype", DTYPES)
        def test_param(self, dtype):
            torch.ones(1, dtype=dtype)

        def test_uses_sparse(self):
            torch.ones(2).to_sparse()

    class TestToyDeviceType(TestCase):
        def test_on_device(self, device):
            torch.ones(1, device=device)
''')

F = "test_toy.py"
IDS = {
    # id -> expected in scope
    f"{F}::TestToy::test_plain": True,
    f"{F}::TestToy::test_forward_mode": True,              # forward-mode AD (fwAD): in, tagged (2026-11-29)
    f"{F}::TestToy::test_needs_cuda": False,                # another device
    f"{F}::TestToy::test_cpu_branch_kept": True,            # device ``if`` replaced by its CPU branch
    f"{F}::TestToy::test_skip_on_mps_only": True,           # an MPS-only skip decorator is dropped
    f"{F}::TestToy::test_calls_dual_helper": True,          # the self._helper it calls uses fwAD: tagged
    f"{F}::TestToy::test_calls_device_function": False,     # the file-level function it calls uses cuda
    f"{F}::TestToy::test_calls_plain_function": True,
    f"{F}::TestToy::test_skipped_by_torch": False,          # torch itself skips it
    f"{F}::TestToy::test_param_float64": True,
    f"{F}::TestToy::test_param_complex128": False,          # rule B: instantiated name
    f"{F}::TestToy::test_uses_sparse": False,
    f"{F}::TestToyDeviceTypeCPU::test_on_device_cpu": True,
    f"{F}::TestToyDeviceTypeCPU::test_on_device_meta": False,
    f"{F}::TestToy::test_not_in_source": False,             # no source method: never counted in
}


@pytest.fixture(scope="module")
def classified():
    return scope.classify(list(IDS), {F: scope.FileIndex(src=TOY)})


@pytest.mark.parametrize("tid", list(IDS))
def test_scope_rule_on_toy_file(classified, tid):
    got = classified[tid]
    assert got["in"] is IDS[tid], (tid, got["why"])
    assert got["in"] == (not got["why"])       # out always says why


def test_scope_reasons_and_classes(classified):
    why = {tid.split("::")[-1]: v["why"] for tid, v in classified.items()}
    tagged = {tid.split("::")[-1] for tid, v in classified.items() if v["forward_mode"]}
    assert tagged == {"test_forward_mode", "test_calls_dual_helper"}      # the forward-mode row tags, never excludes
    assert why["test_needs_cuda"][0].startswith("cuda/other devices")
    assert why["test_uses_sparse"][0].startswith("sparse")
    assert why["test_param_complex128"] == ["name: complex"]
    assert why["test_on_device_meta"] == ["name: meta"]
    assert classified[f"{F}::TestToyDeviceTypeCPU::test_on_device_cpu"]["class"] == "TestToyDeviceType"


def test_rewrite_keeps_line_numbers_and_makes_imports_lazy():
    torchmap = _load("torchmap")
    src = "from torch.autograd import (\n    grad,\n    nonexistent_name,\n)\nx = 1\n"
    out = torchmap.rewrite_source(src)
    assert out.count("\n") == src.count("\n")
    assert out.splitlines()[0] == ("(grad, nonexistent_name,) = __import__('torchmap').lazy_from_import("
                                   "'torch.autograd', ['grad', 'nonexistent_name'])")
    assert out.splitlines()[4] == "x = 1"


def test_layout_error_names_missing_file(tmp_path):
    layout = _load("layout")
    (tmp_path / "test").mkdir()
    with pytest.raises(SystemExit, match="test_autograd.py not found"):
        layout.resolve_src(str(tmp_path))
    (tmp_path / "test" / "test_autograd.py").write_text("")
    (tmp_path / "test" / "autograd").mkdir()
    (tmp_path / "test" / "autograd" / "test_functional.py").write_text("")
    assert layout.resolve_src(str(tmp_path)) == str(tmp_path)


def test_tool_is_outside_the_test_collection():
    """The repo's pytest (testpaths = tests) must never load the harness: it maps torch to jitgrad globally.
    So the tool ships no conftest.py (prepare.py generates one in the results dir, git-ignored, skipped here)."""
    for root, dirs, files in os.walk(TOOL):
        dirs[:] = [d for d in dirs if d != "results"]
        assert "conftest.py" not in files, root
    import tomllib
    with open(os.path.join(os.path.dirname(os.path.dirname(TOOL)), "pyproject.toml"), "rb") as f:
        testpaths = tomllib.load(f)["tool"]["pytest"]["ini_options"]["testpaths"]
    assert all(p not in ("", ".", "./") and not p.startswith(("tools", "./tools")) for p in testpaths), testpaths
