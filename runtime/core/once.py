"""Notices given once per process: a folder's warning (made elsewhere, an int8 graph for another
CPU, an untrained head) would otherwise repeat on every load of the same folder."""
from __future__ import annotations

_given: set[tuple] = set()  # the keys of the notices already given in this process


def first_time(*key) -> bool:
    """True the first time `key` is asked about in this process, False every time after."""
    if key in _given:
        return False
    _given.add(key)
    return True
