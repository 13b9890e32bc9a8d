"""``torch.backends.cudnn``: flags kept with torch's defaults (jitgrad has no cuDNN path)."""
enabled = True
benchmark = False
deterministic = False
allow_tf32 = True


def is_available() -> bool:
    """False: jitgrad does not use cuDNN."""
    return False


def version():
    """None: no cuDNN (torch's answer when it is missing)."""
    return None
