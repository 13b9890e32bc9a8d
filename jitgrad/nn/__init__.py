"""``jitgrad.nn``: for now the functional ops (modules come with a later issue)."""
from . import functional  # noqa: F401
from .dropout import Dropout  # noqa: F401,E402
