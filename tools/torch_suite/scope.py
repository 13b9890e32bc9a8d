"""Apply RULE.md mechanically: which instantiated tests are in scope.

    python scope.py --pytorch-src DIR --work WORK      (after prepare.py; jitgrad importable)

Input: the pytest ids (collect-only with PTH_ALL=1) of WORK/run/test_autograd.py and WORK/run/test_functional.py.
Each id is mapped to its source method (the longest method name of the generic class that prefixes the
instantiated name); the method's source (ast.unparse: decorators + body, comments dropped) plus the source of
the helpers it calls one level deep (``self._x(...)`` methods of its class or file-level bases, file-level
functions) is scanned with the rule-A patterns; the instantiated name with the rule-B patterns.
Writes WORK/scope.json: {id: {"in": bool, "why": [...], "class": generic class}}.
``classify`` is the rule itself (no pytest, no PyTorch needed): tests/test_torch_suite_tool.py checks it.
"""
import argparse
import ast
import copy
import importlib.util
import json
import os
import re
import subprocess
import sys
from collections import Counter, defaultdict

HERE = os.path.dirname(os.path.abspath(__file__))

RULE_A = [
    ("cuda/other devices", r"cuda|CUDA|\bmps\b|MPS|\bxpu\b|XPU|['\"]meta['\"]|deviceCountAtLeast|onlyCUDA|\bhpu\b|"
                           r"privateuse1|torch\.accelerator|\bStream\b|\bstream\(|\bstreams?\b"),
    ("complex", r"complex|cfloat|cdouble|\.conj\(|conj_physical|view_as_real|view_as_complex|\b\d+j\b|"
                r"is_conj|resolve_conj"),
    ("sparse", r"sparse|to_dense|coalesce|\b_indices\b|\b_values\b|\bto_sparse"),
    ("vmap/functorch/vectorize", r"vmap|functorch|torch\.func\b|vectorize=True|is_batchedtensor|"
                                 r"check_batched_grad=True"),
    ("subclass/dispatch", r"LoggingTensor|__torch_dispatch__|__torch_function__|TorchDispatchMode|TorchFunctionMode|"
                          r"_make_subclass|_make_wrapper_subclass|no_dispatch|capture_logs|FlopCounterMode|"
                          r"_python_dispatch|class \w+\((torch\.)?Tensor\)|NestedTensor|nested_tensor|"
                          r"as_nested_tensor|\bnested\.|DTensor|FakeTensor|_pytree|\.as_subclass\("),
    ("private torch._C/internals", r"torch\._C\b|torch\._ops|torch\.ops\.|DelayedError|torch\._dynamo|"
                                   r"torch\._inductor|torch\._functorch|torch\._subclasses|torch\._prims|"
                                   r"torch\._refs|_set_fwd_grad_enabled|_is_view_replay|"
                                   r"_force_original_view_tracking|torch\._lazy|torch\.library|_unsafe_|"
                                   r"torch\._higher_order_ops|graph\._engine|autograd\._functions|torch\._utils\b|"
                                   r"_test_autograd_multiple_dispatch|torch\._C|_get_sequence_nr|_set_sequence_nr|"
                                   r"_get_dispatch_mode|_DisableTorchDispatch|"
                                   r"_EnableTorchFunction|torch\._custom_op|_register_hook_dict|"
                                   r"_unsafe_preserve_version_counter|_is_all_true"),
    ("checkpointing", r"checkpoint|CheckpointPolicy|create_selective_checkpoint_contexts"),
    ("TorchScript/jit/compile", r"torch\.jit|jit\.script|jit\.trace|torch\.compile|ScriptModule|torch\.fx|make_fx|"
                                r"torch\.export"),
    ("threads/subprocess", r"threading|\bThread\(|ThreadPool|concurrent\.futures|multiprocessing|"
                           r"set_multithreading_enabled|subprocess|set_num_threads|runWithPytorchAPIUsageStderr|"
                           r"_run_py_multithread_fn"),
    ("C++ extensions", r"scoped_load_inline|load_inline|cpp_extension"),
    ("profiler internals", r"emit_itt|emit_nvtx|use_kineto|profiler_util|_format_time|FunctionEvent|EventList|"
                           r"_ExperimentalConfig|_KinetoProfile|profiler\._|use_cuda=|use_device="),
    ("bfloat16", r"bfloat16"),
    ("skipped/xfail in torch", r"unittest\.skip\(|expectedFailure\b|@unittest\.skip\b"),
]
# RULE.md's forward-mode row: since the 2026-11-29 amendment (issue 29) it tags a test instead of excluding it
FORWARD_MODE = re.compile(r"fwAD|forward_ad|dual_level|make_dual|unpack_dual|forward-mode|check_forward_ad|"
                          r"forward_grad|def jvp\b|check_batched_forward_grad|_fw_primal|check_fwd_over_rev")
RULE_B = [("logging_tensor", "logging_tensor"), ("vmap", "vectorized"), ("vmap", "vectorize_True"),
          ("cuda", "cuda"), ("meta", "meta"), ("mps", "mps"), ("xpu", "xpu"), ("complex", "complex"),
          ("bfloat16", "bfloat16")]
ISSUE_CLASSES = ["TestAutograd", "TestAutogradFunctional", "TestAutogradDeviceType", "TestAutogradInferenceMode",
                 "TestAllowMutationOnSaved"]


def collect_ids(run_dir):
    """pytest ids of every test in the rewritten files (the conftest's scope filter off)."""
    env = dict(os.environ, PTH_ALL="1")
    xdist_off = ["-n0"] if importlib.util.find_spec("xdist") else []
    out = subprocess.run([sys.executable, "-m", "pytest", "-p", "no:cacheprovider", "--assert=plain", *xdist_off,
                          "--collect-only", "-q", "test_functional.py", "test_autograd.py"],
                         cwd=run_dir, env=env, capture_output=True, text=True)
    ids = [ln.strip() for ln in out.stdout.splitlines() if "::" in ln]
    if not ids:
        raise SystemExit(out.stdout + out.stderr)
    return ids


DEVICE_TOKENS = re.compile(r"cuda|CUDA|\bmps\b|MPS|xpu|XPU|meta|accelerator|TEST_\w+|device_type|hpu")
DEVICE_DECORATORS = re.compile(r"^(skipIf(MPS|Xpu|Rocm)|expectedFailure(MPS|Meta|XLA)|dtypesIf\w+|skipCUDA\w*|"
                               r"skipMeta|skipXLA)")


class PruneDeviceBranches(ast.NodeTransformer):
    """RULE.md A (device row, amended before any test ran): a test *needs* another device only through code
    that runs on CPU too.  Drop decorators that skip / xfail / re-dtype on other devices, and the branches
    of ``if``/ternaries whose condition asks about a device (keeping the else branch, the CPU path)."""

    def visit_FunctionDef(self, node):
        node.decorator_list = [d for d in node.decorator_list
                               if not (DEVICE_DECORATORS.match(ast.unparse(d)) and
                                       DEVICE_TOKENS.search(ast.unparse(d)))]
        self.generic_visit(node)
        return node

    def visit_If(self, node):
        if DEVICE_TOKENS.search(ast.unparse(node.test)):
            new = [self.visit(n) for n in node.orelse]
            return new or ast.Pass()
        self.generic_visit(node)
        return node

    def visit_IfExp(self, node):
        if DEVICE_TOKENS.search(ast.unparse(node.test)):
            return self.visit(node.orelse)
        self.generic_visit(node)
        return node


def pruned_source(node):
    return ast.unparse(PruneDeviceBranches().visit(copy.deepcopy(node)))


class FileIndex:
    def __init__(self, path=None, src=None):
        self.src = open(path, encoding="utf-8").read() if src is None else src
        self.tree = ast.parse(self.src)
        self.classes = {n.name: n for n in self.tree.body if isinstance(n, ast.ClassDef)}
        self.functions = {n.name: n for n in self.tree.body if isinstance(n, ast.FunctionDef)}

    def methods(self, cls_name):
        """Methods of a file class, its file-level bases' methods included (subclass wins)."""
        out = {}
        cls = self.classes.get(cls_name)
        if cls is None:
            return out
        for b in cls.bases:
            if isinstance(b, ast.Name) and b.id in self.classes:
                out.update(self.methods(b.id))
        for n in cls.body:
            if isinstance(n, (ast.FunctionDef, ast.AsyncFunctionDef)):
                out[n.name] = n
        return out

    def scan_text(self, cls_name, fn_node):
        text = pruned_source(fn_node)
        methods = self.methods(cls_name)
        extra = []
        for m in set(re.findall(r"self\.(\w+)\(", text)):
            if m in methods and not m.startswith("test"):
                extra.append(pruned_source(methods[m]))
        for f in set(re.findall(r"\b(\w+)\(", text)):
            if f in self.functions:
                extra.append(pruned_source(self.functions[f]))
        # setUp / tearDown are not scanned: they are plumbing (RULE.md C)
        return text + "\n" + "\n".join(extra)


def classify(ids, files):
    """The rule: {id: {"in", "why", "class", "forward_mode"}} for pytest ids "file::Class::test" given ``files``,
    a dict {file name: FileIndex of the original (unrewritten) source}; ``forward_mode``: the forward-mode row's
    tag (RULE.md, 2026-11-29 amendment)."""
    scope = {}
    for tid in ids:
        fname, cls, name = tid.split("::")
        generic = cls[:-3] if cls.endswith("CPU") else cls
        idx = files[fname]
        methods = {k: v for k, v in idx.methods(generic).items() if k.startswith("test")}
        cands = [m for m in methods if name == m or name.startswith(m + "_")]
        why = []
        if not cands:
            why.append("harness: no source method found")
            text = ""
        else:
            src_name = max(cands, key=len)
            text = idx.scan_text(generic, methods[src_name])
            # tearDown plumbing (RULE.md C) is not part of the test body
            for reason, pat in RULE_A:
                m = re.search(pat, text)
                if m:
                    why.append(f"{reason} ({m.group(0)!r})")
        inst_suffix = name
        for reason, tok in RULE_B:
            if tok in inst_suffix.lower() and not any(reason in w for w in why):
                # only the part of the name after the source method's name comes from parametrization
                src_name = max(cands, key=len) if cands else ""
                if tok in name[len(src_name):].lower() or generic != cls and tok in name[len(src_name):]:
                    why.append(f"name: {reason}")
        scope[tid] = {"in": not why, "why": why, "class": generic, "forward_mode": bool(FORWARD_MODE.search(text))}
    return scope


def main(argv=None):
    ap = argparse.ArgumentParser(description="apply RULE.md: WORK/scope.json")
    ap.add_argument("--pytorch-src", help="PyTorch source dir (default $JITGRAD_TORCH_SUITE_SRC)")
    ap.add_argument("--work", required=True, help="the work dir prepare.py wrote")
    args = ap.parse_args(argv)
    sys.path.insert(0, HERE)
    from layout import resolve_src, source_paths
    src = source_paths(resolve_src(args.pytorch_src))
    work = os.path.abspath(args.work)
    ids = collect_ids(os.path.join(work, "run"))
    scope = classify(ids, {f: FileIndex(p) for f, p in src.items()})
    with open(os.path.join(work, "scope.json"), "w") as f:
        json.dump(scope, f, indent=1)
    by_cls = defaultdict(Counter)
    for tid, v in scope.items():
        by_cls[v["class"]]["in" if v["in"] else "out"] += 1
    total_in = 0
    for c, cnt in sorted(by_cls.items()):
        print(f"{c:45s} in {cnt['in']:4d}  out {cnt['out']:4d}")
        total_in += cnt["in"]
    print("total in scope:", total_in, " collected:", len(scope),
          " forward-mode tagged in scope:", sum(v["in"] and v.get("forward_mode", False) for v in scope.values()))
    reasons = Counter(w.split(" (")[0] for v in scope.values() for w in v["why"][:1])
    print("first exclusion reason:", dict(reasons.most_common()))


if __name__ == "__main__":
    main()
