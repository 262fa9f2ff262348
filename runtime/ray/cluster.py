"""Joining a Ray cluster: what `serve --ray` and `run --ray` share.

`ray` is imported inside `join`, so that this module costs nothing to a command that never
joins a cluster (`bertonnx --help` imports no Ray).
"""
from __future__ import annotations

import logging
import socket

from ..core.errors import ConfigError

_START = "start one with `ray start --head`, or pass its address"


def join(address: str, flag: str = "--ray") -> None:
    """`ray.init` on the cluster at `address` (host:port, or "auto": the local one), quietly;
    any failure is one ConfigError line. bertonnx runs on one of the cluster's nodes: a Ray
    Client address (ray://) is refused."""
    if address.startswith("ray://"):
        raise ConfigError(f"{flag} takes a cluster's address (host:port) or auto, not a Ray "
                          "Client address", "run bertonnx on a node of the cluster")
    _check_reachable(address, flag)
    import ray  # lazy: the ray extra's (module docstring)
    try:
        ray.init(address=address, logging_level=logging.WARNING, log_to_driver=False)
    except (ConnectionError, ValueError, RuntimeError) as e:
        raise ConfigError(f"cannot join the Ray cluster at {address} ({e})",
                          f"{_START} to {flag} (bertonnx must run on one of its nodes)") from e


def _check_reachable(address: str, flag: str) -> None:
    """A host:port with nothing listening is one line at once (ray.init would retry for
    minutes); "auto" and other forms are left to Ray."""
    host, sep, port = address.rpartition(":")
    if not sep or not port.isdigit() or "/" in address:
        return
    try:
        socket.create_connection((host, int(port)), timeout=10).close()
    except OSError as e:
        raise ConfigError(f"cannot reach a Ray cluster at {address} ({e.strerror or e})",
                          f"{_START} to {flag}") from e
