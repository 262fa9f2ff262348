"""Port drawing: Ray refuses a node two of whose components share a port, Triton fails to bind
HTTP and gRPC to one port — both happened when ports were drawn one socket at a time."""
import socket

from bertonnx.runtime.core.ports import free_ports, port_free
from tests.runtime._ray_cluster import HEAD_PORTS, NODE_PORTS


def test_every_port_a_cluster_hands_out_is_its_own():
    taken: set[int] = set()
    # a head and three workers, many times over: the OS reuses a just-closed port readily,
    # which is how a head once got one port for its client server and its object manager
    drawn = []
    for _ in range(50):
        for n in (len(NODE_PORTS) + len(HEAD_PORTS), *[len(NODE_PORTS)] * 3):
            ports = free_ports("127.0.0.1", n, avoid=taken)
            assert len(ports) == n
            taken.update(ports)
            drawn += ports
    assert len(drawn) == 50 * (9 + 18)
    assert len(set(drawn)) == len(drawn) and set(drawn) == taken


def test_a_drawn_port_is_free_and_a_bound_one_is_not():
    (port,) = free_ports("127.0.0.1", 1)
    assert port_free("127.0.0.1", port)
    with socket.socket() as s:
        s.bind(("127.0.0.1", port))
        s.listen()
        assert not port_free("127.0.0.1", port)
