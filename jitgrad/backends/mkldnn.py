"""``torch.backends.mkldnn``: flags kept (jitgrad's CPU matmul is OpenBLAS through SciPy)."""
enabled = True
deterministic = False


def is_available() -> bool:
    return False
