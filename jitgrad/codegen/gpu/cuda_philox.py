"""Philox4x32-10 written inline into CUDA kernel source: the scalar bodies of ``rand_uniform`` / ``rand_normal``.

The CPU loops call ``codegen/kernels/philox.py``'s Numba functions; a CUDA kernel cannot call a Numba device function
when its PTX is built without a driver (see ``math_table.py``), so the rounds are written into the kernel text as
statements before the element's value.  They follow ``ir/philox.py`` exactly (key = the seed's two 32-bit words,
counter = (index lo, index hi, offset lo, offset hi)), in uint64 arithmetic on 32-bit values, so a draw on the
device has the CPU's bits: uniforms are equal; normals go through libdevice's log/cos (the simulator: Python's
math), which may differ from the host libm in the last bit.  Nothing here imports Numba.
"""
from __future__ import annotations

# module-level constants of a kernel using Philox (typed: uint64 arithmetic must not mix with int64, which
# Numba would take through float64)
CONSTS = {"PHX_M0": "np.uint64(0xD2511F53)", "PHX_M1": "np.uint64(0xCD9E8D57)", "PHX_W0": "np.uint64(0x9E3779B9)",
          "PHX_W1": "np.uint64(0xBB67AE85)", "PHX_MASK": "np.uint64(0xFFFFFFFF)", "PHX_32": "np.uint64(32)",
          "PHX_21": "np.uint64(21)", "PHX_11": "np.uint64(11)", "PHX_8": "np.uint64(8)"}


def _words(p, seed, offset, index, ind):
    """Lines leaving the four Philox words of element ``index`` of the draw (``seed``, ``offset``: int64
    expressions) in ``{p}c0 .. {p}c3``.  The int64 -> 32-bit words split is done in int64 (an arithmetic
    shift, then a mask) so a negative seed keeps its bits without a signed-to-unsigned conversion."""
    def lo(x):
        return f"np.uint64(int64({x}) & 4294967295)"

    def hi(x):
        return f"np.uint64((int64({x}) >> 32) & 4294967295)"
    return [f"{ind}{p}k0 = {lo(seed)}", f"{ind}{p}k1 = {hi(seed)}",
            f"{ind}{p}c0 = {lo(index)}", f"{ind}{p}c1 = {hi(index)}",
            f"{ind}{p}c2 = {lo(offset)}", f"{ind}{p}c3 = {hi(offset)}",
            f"{ind}for {p}r in range(10):",
            f"{ind}    if {p}r > 0:",
            f"{ind}        {p}k0 = ({p}k0 + PHX_W0) & PHX_MASK",
            f"{ind}        {p}k1 = ({p}k1 + PHX_W1) & PHX_MASK",
            f"{ind}    {p}p0 = {p}c0 * PHX_M0",
            f"{ind}    {p}p1 = {p}c2 * PHX_M1",
            f"{ind}    {p}n0 = ({p}p1 >> PHX_32) ^ {p}c1 ^ {p}k0",
            f"{ind}    {p}n2 = ({p}p0 >> PHX_32) ^ {p}c3 ^ {p}k1",
            f"{ind}    {p}c1 = {p}p1 & PHX_MASK",
            f"{ind}    {p}c3 = {p}p0 & PHX_MASK",
            f"{ind}    {p}c0 = {p}n0",
            f"{ind}    {p}c2 = {p}n2"]


def _u53(a, b):
    return f"(float64(({a} << PHX_21) | ({b} >> PHX_11)) * 1.1102230246251565e-16)"      # 2**-53


def draw(op: str, dtype: str, p: str, seed: str, offset: str, index: str, ind: str):
    """(lines, value expression) of one element of ``rand_uniform`` or ``rand_normal`` in ``dtype``
    ("float32" / "float64"); ``p``: a prefix for the local names, unique in the kernel."""
    lines = _words(p, seed, offset, index, ind)
    if op == "rand_uniform":
        if dtype == "float32":
            return lines, f"(float32({p}c0 >> PHX_8) * float32(5.960464477539063e-08))"      # 24 bits * 2**-24
        return lines, _u53(f"{p}c0", f"{p}c1")
    if op == "rand_normal":      # Box-Muller in float64, rounded to dtype (1 - u1 is in (0, 1]: the log is finite)
        lines += [f"{ind}{p}u1 = {_u53(f'{p}c0', f'{p}c1')}", f"{ind}{p}u2 = {_u53(f'{p}c2', f'{p}c3')}"]
        return lines, (f"{dtype}(math.sqrt(-2.0 * math.log(1.0 - {p}u1)) * "
                       f"math.cos(6.283185307179586 * {p}u2))")
    raise KeyError(f"cuda codegen: {op} is not a Philox draw")


__all__ = ["CONSTS", "draw"]
