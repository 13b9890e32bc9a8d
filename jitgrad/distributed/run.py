"""``python -m jitgrad.distributed.run -n 4 train.py [args]``: a thin wrapper over ``mpiexec``.

It runs ``mpiexec -n 4 <this python> train.py [args]`` (``-m module`` runs a module, like torchrun), with the
``mpiexec`` that sits next to this Python (the one the ``mpich`` wheel installs in a venv) or else the one on
PATH, and exits with its status.  ``--nproc-per-node``/``--nproc_per_node`` are torchrun's spellings of ``-n``;
``--mpiexec PATH`` picks the launcher; ``--mpi-arg ARG`` (repeatable) passes ARG through to mpiexec (hosts files,
bindings).  Anything mpiexec can do is there: this file only spares the user the interpreter path.
"""
from __future__ import annotations

import argparse
import os
import shutil
import subprocess
import sys


def find_mpiexec(explicit: str | None = None) -> str:
    """The mpiexec to use: ``explicit``, the one beside this Python, or the one on PATH."""
    if explicit:
        return explicit
    here = os.path.join(os.path.dirname(sys.executable), "mpiexec")
    if os.path.exists(here):
        return here
    found = shutil.which("mpiexec")
    if found is None:
        raise SystemExit("jitgrad.distributed.run: no mpiexec found; pip install 'jitgrad[distributed]' "
                         "(mpi4py and mpich) or pass --mpiexec PATH")
    return found


def command(argv) -> list:
    """The mpiexec command line for ``argv`` (this launcher's arguments)."""
    p = argparse.ArgumentParser(prog="python -m jitgrad.distributed.run",
                                description="launch a jitgrad script on N MPI processes (a thin wrapper over mpiexec)")
    p.add_argument("-n", "--nproc-per-node", "--nproc_per_node", dest="n", type=int, default=1,
                   help="number of processes")
    p.add_argument("--mpiexec", default=None, help="the mpiexec to run (default: beside this Python, else PATH)")
    p.add_argument("--mpi-arg", dest="mpi_args", action="append", default=[],
                   help="an argument passed through to mpiexec (repeatable)")
    p.add_argument("-m", dest="module", action="store_true", help="run the script argument as a module")
    p.add_argument("script", help="the training script (or module with -m)")
    p.add_argument("args", nargs=argparse.REMAINDER, help="the script's arguments")
    a = p.parse_args(argv)
    if a.n < 1:
        p.error("-n must be at least 1")
    target = ["-m", a.script] if a.module else [a.script]
    return [find_mpiexec(a.mpiexec), "-n", str(a.n), *a.mpi_args, sys.executable, *target, *a.args]


def main(argv=None) -> int:
    cmd = command(sys.argv[1:] if argv is None else argv)
    return subprocess.call(cmd)


if __name__ == "__main__":
    sys.exit(main())
