"""Where PyTorch's test files are: a PyTorch source tree given by --pytorch-src or $JITGRAD_TORCH_SUITE_SRC.

Expected layout (a git checkout of pytorch; see README.md for the pinned commits):
    DIR/test/test_autograd.py
    DIR/test/autograd/test_functional.py
    DIR/test/expect/            (expect files for assertExpected)
"""
import os

ENV_VAR = "JITGRAD_TORCH_SUITE_SRC"
# name of the rewritten copy in the work dir -> path inside the PyTorch tree
TEST_FILES = {
    "test_autograd.py": os.path.join("test", "test_autograd.py"),
    "test_functional.py": os.path.join("test", "autograd", "test_functional.py"),
}
EXPECT_SUBDIR = os.path.join("test", "expect")


def resolve_src(arg=None):
    """The PyTorch source dir (absolute): ``arg`` if given, else $JITGRAD_TORCH_SUITE_SRC; exits with a
    message naming the missing file when the layout is not there."""
    src = arg or os.environ.get(ENV_VAR)
    if not src:
        raise SystemExit(f"torch_suite: give the PyTorch source dir with --pytorch-src DIR or ${ENV_VAR} "
                         f"(it must hold {', '.join(TEST_FILES.values())})")
    src = os.path.abspath(src)
    for rel in TEST_FILES.values():
        if not os.path.isfile(os.path.join(src, rel)):
            raise SystemExit(f"torch_suite: {os.path.join(src, rel)} not found (expected layout: "
                             f"DIR/{', DIR/'.join(TEST_FILES.values())}, DIR/{EXPECT_SUBDIR}/)")
    return src


def source_paths(src):
    """{rewritten file name: absolute path of PyTorch's file} for the source dir ``src``."""
    return {name: os.path.join(src, rel) for name, rel in TEST_FILES.items()}
