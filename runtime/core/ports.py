"""Free TCP ports for servers this package starts (--port 0, Triton's three, a test cluster's)."""
from __future__ import annotations

import socket
from collections.abc import Collection


def free_ports(host: str, n: int, avoid: Collection[int] = ()) -> list[int]:
    """`n` different ports free on `host` now, none in `avoid`.

    Every socket stays bound until all `n` are drawn: one closed before the next is drawn can
    come back, and then two components (Triton's HTTP and gRPC, a Ray node's client server and
    object manager) get one port and the second fails to bind. `avoid` keeps separate calls
    apart, for ports handed out earlier and not yet bound by whoever got them.
    """
    socks, ports = [], []
    try:
        while len(ports) < n:
            s = socket.socket()
            socks.append(s)
            s.bind((host, 0))
            port = s.getsockname()[1]
            if port not in avoid:
                ports.append(port)
        return ports
    finally:
        for s in socks:
            s.close()


def port_free(host: str, port: int) -> bool:
    with socket.socket() as s:
        try:
            s.bind((host, port))
        except OSError:
            return False
    return True
