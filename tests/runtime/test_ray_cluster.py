"""The test cluster's port drawing: Ray refuses a node two of whose components share a port."""
from tests.runtime._ray_cluster import HEAD_PORTS, NODE_PORTS, _free_ports


def test_every_port_a_cluster_hands_out_is_its_own():
    taken: set[int] = set()
    # a head and three workers, many times over: the OS reuses a just-closed port readily,
    # which is how a head once got one port for its client server and its object manager
    drawn = [p for _ in range(50)
             for n in (len(NODE_PORTS) + len(HEAD_PORTS), *[len(NODE_PORTS)] * 3)
             for p in _free_ports(n, taken)]
    assert len(drawn) == 50 * (9 + 18)
    assert len(set(drawn)) == len(drawn) and set(drawn) == taken
