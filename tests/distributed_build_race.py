"""The README's data-parallel example while one rank's build lags the other's:
``mpiexec -n 2 python tests/distributed_build_race.py`` (tests/test_distributed.py launches it).

Default settings (background builds, the Numba backend) and the cache directory the test gives.  Each round runs
``examples/ddp_train.py`` in this process with a build hook (``build_policy.pending_build`` wrapped): rank
``slow`` never gets its code (every call is served while "building"), the other rank builds before its first
call (its calls all run the compiled code).  The last round has no hook.  Each round prints ``rank R ROUND k
done``; a round in which the ranks took paths issuing different collectives would hang here.
"""
import os
import runpy
import sys

from jitgrad.jit import build_policy

HERE = os.path.dirname(os.path.abspath(__file__))
EXAMPLE = os.path.join(os.path.dirname(HERE), "examples", "ddp_train.py")
RANK = int(os.environ.get("PMI_RANK", os.environ.get("OMPI_COMM_WORLD_RANK", "0")))
_pending = build_policy.pending_build


class _NeverReady:
    """A build that never starts: the code of this graph is never ready on this rank."""

    def start(self):
        pass


def _hold(*args):
    return _pending(*args) and _NeverReady()


def _build_first(*args):
    cg = _pending(*args)
    if cg is not None:
        cg.start()
        cg.wait()
        return _pending(*args)      # None once its code is ready
    return None


for k, slow in enumerate((0, 1, None)):
    build_policy.pending_build = _pending if slow is None else (_hold if RANK == slow else _build_first)
    runpy.run_path(EXAMPLE, run_name="__main__")
    print(f"rank {RANK} ROUND {k} done", file=sys.stderr, flush=True)   # (stdout: the example's loss lines)
