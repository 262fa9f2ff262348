"""`bertonnx serve`: click maps flags onto ServeOptions and runs the server."""
from __future__ import annotations

import logging
from pathlib import Path

import click

from .batching import BatchConfig
from .process import run_server
from .settings import ServeOptions


@click.command("serve")
@click.argument("model_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 opens it to the network).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0 = any free port, printed at start).")
@click.option("--max-batch-size", default=32, show_default=True, type=click.IntRange(1),
              help="Most inputs merged into one model call.")
@click.option("--max-wait-ms", default=5.0, show_default=True, type=click.FloatRange(0),
              help="Longest a request waits for others to batch with.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1),
              help="Model calls run at once (threads sharing one onnxruntime session).")
@click.option("--max-body-bytes", default=1 << 20, show_default=True, type=click.IntRange(1),
              help="Largest request body; larger ones get 413.")
@click.option("--threads", default=None, type=click.IntRange(0),
              help="onnxruntime intra-op threads per call [default: onnxruntime's].")
@click.option("--providers", default=None, help="onnxruntime providers, e.g. cuda,cpu.")
@click.pass_context
def serve(ctx, model_dir, host, port, max_batch_size, max_wait_ms, workers, max_body_bytes,
          threads, providers):
    """Serve the export in DIR over HTTP: POST /predict, GET /health, GET /metrics."""
    debug = bool((ctx.find_root().obj or {}).get("debug"))
    options = ServeOptions(host=host, port=port,
                           batch=BatchConfig(max_batch_size, max_wait_ms, workers),
                           max_body_bytes=max_body_bytes, threads=threads, providers=providers)
    logging.getLogger("bertonnx").setLevel(logging.INFO)
    return run_server(model_dir, options, log_level="debug" if debug else "warning",
                      announce=lambda line: click.echo(line, err=True))
