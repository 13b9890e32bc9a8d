"""Calling one function from several threads at once, for the tests of thread safety."""
from __future__ import annotations

import threading


def call_from_threads(fn, threads: int, calls: int) -> list:
    """Call ``fn()`` ``calls`` times on each of ``threads`` threads started together; returns every result (in
    no fixed order) and re-raises the first exception any thread met."""
    results, errors = [], []

    def work():
        try:
            for _ in range(calls):
                results.append(fn())
        except BaseException as e:  # noqa: BLE001 - re-raised in the calling thread
            errors.append(e)
    ts = [threading.Thread(target=work) for _ in range(threads)]
    for t in ts:
        t.start()
    for t in ts:
        t.join()
    if errors:
        raise errors[0]
    return results
