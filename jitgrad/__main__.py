"""``python -m jitgrad demo`` trains a small model; ``python -m jitgrad bench`` runs the benchmark suite;
``python -m jitgrad entry add 2`` prints the generated eager entry of a primitive (``entry record``: dispatch's
``_record``)."""
from __future__ import annotations

import argparse
import sys

from . import demo as _demo


def main(argv=None):
    p = argparse.ArgumentParser(prog="python -m jitgrad")
    sub = p.add_subparsers(dest="cmd", required=True)
    d = sub.add_parser("demo", help="train a small MLP and show an anomaly-mode catch")
    d.add_argument("--steps", type=int, default=200)
    b = sub.add_parser("bench", help="run the benchmark suite (jitgrad and any installed peers)")
    b.add_argument("--only", nargs="*", default=None, help="workload ids, e.g. B5 B7")
    b.add_argument("--device", default="cpu", choices=("cpu", "cuda"),
                   help="cuda: B1, B2, B3 on the GPU (benchmarks/cuda_b1_b2_b3.py)")
    b.add_argument("--smoke", action="store_true", help="with --device cuda: tiny sizes (runs on the simulator)")
    e = sub.add_parser("entry", help="print a primitive's generated flat entry (runtime/entry_source.py)")
    e.add_argument("name", help="the primitive (add, tanh, matmul, ...), or record: dispatch._record")
    e.add_argument("arity", nargs="?", type=int, default=2, choices=(1, 2), help="its arguments (default 2)")
    args = p.parse_args(argv)
    if args.cmd == "entry":
        from .runtime.flat_bind import generated_text
        print(generated_text(args.name, args.arity), end="")
        return 0
    if args.cmd == "demo":
        return _demo.run(steps=args.steps)
    from .bench import run_suite, run_cuda
    if args.device == "cuda":
        return run_cuda(args.smoke)
    return run_suite(args.only)


if __name__ == "__main__":
    sys.exit(main())
