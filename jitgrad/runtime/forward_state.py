"""The active forward-mode handler, if any (read on every bind, so kept in a tiny module of its own)."""


class _State:
    active = None   # runtime/dual.Duals while a dual level holds tangents that bind must propagate


STATE = _State()
