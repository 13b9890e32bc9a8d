"""Code generation: Graph -> Numba source -> callable (imports jitgrad.ir only)."""
