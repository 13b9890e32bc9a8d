"""``torch.backends.openmp``."""


def is_available() -> bool:
    """False: jitgrad's parallel loops are Numba's (its threading layer), not torch's OpenMP build."""
    return False
