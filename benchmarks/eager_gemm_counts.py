"""Eager ``x @ y`` counted, never timed: instructions of one call per shape on the small-product kernel
(``jit/eager_gemm_kernel.py``) and on SciPy's OpenBLAS (``JITGRAD_EAGER_GEMM_KERNEL=0``), each in its own process
under callgrind (one thread, OpenBLAS on its Haswell kernels: ``JITGRAD_BLAS_CORETYPE=keep``; the kernel as
LLVM builds it for the CPU valgrind shows, 256-bit vectors), instrumentation on around ``CALLS`` warm calls per shape
(callgrind's client requests, from a shim compiled at run time: ``callgrind_control`` from a subprocess is served
only while the process runs guest code, too late for calls this short).  The kernel process serves every size
(``JITGRAD_EAGER_GEMM_KERNEL_MAX``), so the table shows where the kernel stops paying.
What decides ``eager_gemm_kernel.MAX_MACS`` (with timings: instructions do not see cache misses).

    python benchmarks/eager_gemm_counts.py

Counted 2026-11-30 (float32, instructions a call, the dispatch's Python included):

| m x k x n | multiply-adds | OpenBLAS path | kernel path | kernel / OpenBLAS |
| --- | --- | --- | --- | --- |
| 32x32x32 | 32,768 | 74,782 | 73,487 | 0.98 |
| 64x64x64 | 262,144 | 147,802 | 113,838 | 0.77 |
| 128x128x128 | 2,097,152 | 760,856 | 588,030 | 0.77 |
| 256x64x256 | 4,194,304 | 1,523,540 | 1,160,751 | 0.76 |
| 256x256x64 (y.T, copied) | 4,194,304 | 1,329,991 | 1,199,449 | 0.90 |
| 64x256x256 | 4,194,304 | 1,457,141 | 1,137,930 | 0.78 |
| 256x256x256 | 16,777,216 | 4,845,325 | 4,451,077 | 0.92 |
| 512x256x512 | 67,108,864 | 18,541,441 | 17,694,985 | 0.95 |
| 512x512x512 | 134,217,728 | 35,967,899 | 36,750,939 | 1.02 |

The kernel's lead shrinks as OpenBLAS's packing is spread over more multiply-adds, and the kernel has no cache
blocking (its operands stream from memory once they outgrow L2, which instructions do not show): served up to
256 x 256 x 256 (``eager_gemm_kernel.MAX_MACS``, 2^24), where both operands still fit in L2.
"""
from __future__ import annotations

import glob
import os
import subprocess
import sys
import tempfile

CALLS = 3
# (m, k, n, y transposed): B3's products among them (256 x 64 x 256 and its transposes; gh @ W1.T copies W1.T)
SHAPES = ((32, 32, 32, False), (64, 64, 64, False), (128, 128, 128, False), (256, 64, 256, False),
          (256, 256, 64, True), (64, 256, 256, False), (256, 256, 256, False), (512, 256, 512, False),
          (512, 512, 512, False))
_SHIM = """#include <valgrind/callgrind.h>
void on(void) { CALLGRIND_START_INSTRUMENTATION; }
void off(void) { CALLGRIND_STOP_INSTRUMENTATION; }
void dump(void) { CALLGRIND_DUMP_STATS; }
"""


def _shim(folder: str):
    import ctypes
    src, lib = os.path.join(folder, "shim.c"), os.path.join(folder, "shim.so")
    with open(src, "w") as f:
        f.write(_SHIM)
    subprocess.run(["cc", "-O1", "-shared", "-fPIC", "-o", lib, src], check=True)
    return ctypes.CDLL(lib)


def under_callgrind():
    import numpy as np
    import jitgrad as jg
    rng = np.random.default_rng(0)
    shim = _shim(os.environ["EAGER_GEMM_COUNTS_DIR"])
    for m, k, n, ty in SHAPES:
        x = jg.tensor(rng.standard_normal((m, k), dtype=np.float32))
        y = rng.standard_normal((n, k) if ty else (k, n), dtype=np.float32)
        y = jg.tensor(y).T if ty else jg.tensor(y)
        for _ in range(3):
            x @ y
        shim.on()
        for _ in range(CALLS):
            x @ y
        shim.off()
        shim.dump()


def _counts(kernel: bool) -> dict:
    out = tempfile.mkdtemp(prefix="eager-gemm-counts-")
    env = dict(os.environ, NUMBA_NUM_THREADS="1", OPENBLAS_NUM_THREADS="1", OMP_NUM_THREADS="1",
               JITGRAD_BLAS_CORETYPE=os.environ.get("JITGRAD_BLAS_CORETYPE", "keep"), JITGRAD_EAGER_KERNELS="sync",
               JITGRAD_EAGER_GEMM_KERNEL="1" if kernel else "0", JITGRAD_EAGER_GEMM_KERNEL_MAX=str(1 << 40),
               EAGER_GEMM_COUNTS_DIR=out)
    subprocess.run(["valgrind", "--tool=callgrind", "--instr-atstart=no",
                    f"--callgrind-out-file={os.path.join(out, 'cg.out')}", sys.executable, os.path.abspath(__file__),
                    "--under-callgrind"], env=env, check=True, capture_output=True, timeout=3600)
    return _read(out)


def _read(out: str) -> dict:
    """{shape: instructions a call} from the dumps in folder ``out``."""
    found = {}
    # one dump per shape, in order (cg.out.1, cg.out.2, ...; the exit's dump, instrumentation off, is cg.out)
    dumps = sorted(glob.glob(os.path.join(out, "cg.out.*")), key=lambda p: int(p.rsplit(".", 1)[1].split("-")[0]))
    for path, shape in zip(dumps, SHAPES):
        with open(path) as f:
            for line in f:
                if line.startswith("totals:"):      # (the header's summary: is 0)
                    found[shape] = int(line.split()[1]) / CALLS
                    break
    return found


def main():
    k, b = _counts(True), _counts(False)
    print(f"# eager x @ y, float32, instructions a call (callgrind, 1 thread, {CALLS} calls)")
    print("| m x k x n | multiply-adds | OpenBLAS path | kernel path | kernel / OpenBLAS |\n| --- | --- | --- | --- | --- |")
    for m, kk, n, ty in SHAPES:
        key = (m, kk, n, ty)
        if key in k and key in b:
            print(f"| {m}x{kk}x{n}{' (y.T)' if ty else ''} | {m * kk * n:,} | {b[key]:,.0f} | {k[key]:,.0f} "
                  f"| {k[key] / b[key]:.2f} |")


if __name__ == "__main__":
    if "--under-callgrind" in sys.argv:
        under_callgrind()
    else:
        main()
