"""runtime/triton/launch.py's port choice: `--port 0` gives Triton three ports of its own."""
from bertonnx.runtime.triton.launch import Ports


def test_port_zero_gives_http_grpc_and_metrics_different_ports():
    # the OS hands a just-closed port out again readily: drawn one at a time, HTTP and gRPC
    # could get one port and tritonserver would fail to bind the second
    for _ in range(200):
        p = Ports.choose("127.0.0.1", 0)
        assert len({p.http, p.grpc, p.metrics}) == 3 and all(0 < x < 65536 for x in
                                                              (p.http, p.grpc, p.metrics))


def test_a_given_grpc_port_is_kept_with_port_zero():
    grpc = Ports.choose("127.0.0.1", 0).grpc   # a port free now
    assert Ports.choose("127.0.0.1", 0, grpc=grpc).grpc == grpc
