"""The active profiler, if any (read on every bind, so kept in a tiny module of its own)."""


class _State:
    active = None   # an autograd.profiler.profile while one is recording


STATE = _State()
