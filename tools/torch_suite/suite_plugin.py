"""pytest plumbing for WORK/run/conftest.py: torch -> jitgrad before the test modules import; only in-scope
tests (scope.json, written by scope.py) are collected.  With PTH_ALL=1 every test is collected (scope.py's
collect-only pass)."""
import json
import os
import sys

HERE = os.path.dirname(os.path.abspath(__file__))
if HERE not in sys.path:
    sys.path.insert(0, HERE)
import torchmap  # noqa: E402

_SCOPE = None


def install(scope_path):
    """Map torch to jitgrad and remember where scope.json is."""
    global _SCOPE
    _SCOPE = scope_path
    torchmap.install()


def pytest_collection_modifyitems(config, items):
    if os.environ.get("PTH_ALL"):
        return
    if not _SCOPE or not os.path.exists(_SCOPE):
        raise RuntimeError(f"torch_suite: no scope file {_SCOPE!r}; run scope.py first (run.sh does)")
    scope = json.load(open(_SCOPE))
    keep, drop = [], []
    for it in items:
        key = f"{os.path.basename(str(it.fspath))}::{it.cls.__name__ if it.cls else ''}::{it.name}"
        (keep if scope.get(key, {}).get("in") else drop).append(it)
    config.hook.pytest_deselected(items=drop)
    items[:] = keep
