"""bench/serve_peers.py: its load generator sends a different body each request (the point of
using it over `hey`), and the whole bench runs `bertonnx serve` on a tiny export and reports
what it measured. infinity itself is a bench-only peer (its own venv), so only the command it
would be started with is checked here. No timing is asserted."""
from __future__ import annotations

import json
import shutil
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from types import SimpleNamespace

import pytest

from bertonnx.bench import serve_peers

needs_wrk = pytest.mark.skipif(shutil.which("wrk") is None,
                               reason="wrk is not installed (`make load-tools` installs it)")


class Recorder(BaseHTTPRequestHandler):
    """Answers every POST 200 with a small JSON body and keeps (path, body)."""
    seen: list[tuple[str, str]] = []

    def do_POST(self):
        body = self.rfile.read(int(self.headers["Content-Length"])).decode()
        self.seen.append((self.path, body))
        out = b'{"ok": true}'
        self.send_response(200)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(out)))
        self.end_headers()
        self.wfile.write(out)

    def log_message(self, *args):
        pass


@needs_wrk
def test_wrk_cycles_through_every_body(tmp_path):
    bodies = serve_peers.bodies(1, count=40)
    assert len(set(bodies)) == 40  # 40 different sentences, one per body
    path = tmp_path / "bodies.jsonl"
    path.write_text("\n".join(bodies) + "\n")
    Recorder.seen = []
    server = ThreadingHTTPServer(("127.0.0.1", 0), Recorder)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        figures = serve_peers.wrk(f"http://127.0.0.1:{server.server_port}", "/v1/embeddings",
                                  path, clients=2, seconds=1)
    finally:
        server.shutdown()
        server.server_close()
    seen = list(Recorder.seen)
    assert figures["requests"] > 40 and figures["non_2xx"] == 0
    assert figures["requests"] <= len(seen)  # wrk counts answered ones; a last may be cut off
    assert {p for p, _ in seen} == {"/v1/embeddings"}
    assert {b for _, b in seen} == set(bodies)  # every body went out, and nothing else
    # one connection's requests follow the file's order, so consecutive bodies differ
    assert sum(a != b for (_, a), (_, b) in zip(seen, seen[1:])) >= len(seen) - 2
    assert 0 < figures["p50_ms"] <= figures["p99_ms"]


@needs_wrk
def test_the_bench_serves_a_tiny_export_and_reports_each_size(tiny_export, tiny_checkpoint,
                                                              tmp_path, capsys):
    out = tmp_path / "peers.json"
    assert serve_peers.main([str(tiny_export("feature-extraction")), "--rounds", "1",
                             "--seconds", "1", "--clients", "2", "--per-request", "1,4",
                             "--bertonnx", "", "--bertonnx", "--workers 2 --threads 1",
                             "--reference", str(tiny_checkpoint("feature-extraction")),
                             "--json", str(out)]) == 0
    rows = json.loads(out.read_text())["rows"]
    assert {(r["server"], r["texts_per_request"]) for r in rows} == {
        ("bertonnx serve (defaults)", 1), ("bertonnx serve (defaults)", 4),
        ("bertonnx serve --workers 2 --threads 1", 1),
        ("bertonnx serve --workers 2 --threads 1", 4)}
    for r in rows:
        assert r["errors"] == 0 and r["texts_per_s"] > 0 and r["peak_rss_mb"] > 10
        # the export of that checkpoint, served: sentence-transformers' numbers (fp32)
        assert r["cosine_worst"] > 0.9999, r
    table = capsys.readouterr().out
    assert "| bertonnx serve (defaults) | 4 |" in table and "2 clients" in table


def test_infinity_runs_in_its_folder_with_the_flags_given(tmp_path):
    args = SimpleNamespace(exports=["e/fp32"], bertonnx=None, infinity="/venv/bin/python",
                           infinity_run=[f"{tmp_path} --engine optimum --pooling-method mean"])
    (plain, infinity) = serve_peers.peers_from(args)
    assert plain.argv is None and plain.flags == ["--name", serve_peers.MODEL]
    assert (plain.name, plain.export) == ("bertonnx serve (defaults)", "e/fp32")
    assert infinity.cwd == str(tmp_path) and infinity.route == "/v1/embeddings"
    argv = infinity.argv
    assert argv[:4] == ["/venv/bin/python", "-m", "infinity_emb.cli", "v2"]
    assert argv[argv.index("--model-id") + 1] == "."
    assert argv[-4:] == ["--engine", "optimum", "--pooling-method", "mean"]
    assert "{port}" in argv and argv[argv.index("--url-prefix") + 1] == "/v1"


def test_each_export_is_served_with_each_flags_and_named_by_its_folder():
    args = SimpleNamespace(exports=["e/fp32", "e/int8"], bertonnx=["", "--workers 2"],
                           infinity=None, infinity_run=None)
    assert [(p.name, p.export, p.flags) for p in serve_peers.peers_from(args)] == [
        ("bertonnx serve fp32 (defaults)", "e/fp32", ["--name", serve_peers.MODEL]),
        ("bertonnx serve fp32 --workers 2", "e/fp32", ["--name", serve_peers.MODEL,
                                                       "--workers", "2"]),
        ("bertonnx serve int8 (defaults)", "e/int8", ["--name", serve_peers.MODEL]),
        ("bertonnx serve int8 --workers 2", "e/int8", ["--name", serve_peers.MODEL,
                                                       "--workers", "2"])]


def test_two_exports_of_one_folder_name_are_refused_in_one_line(capsys):
    with pytest.raises(SystemExit) as exit_:
        serve_peers.main(["a/export", "b/export"])
    assert exit_.value.code == 2
    err = capsys.readouterr().err.strip().splitlines()[-1]
    assert err.endswith("the exports' folder names each name a row, and repeat: export, export")
