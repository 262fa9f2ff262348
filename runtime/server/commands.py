"""`bertonnx serve`: click maps flags onto ServeOptions and runs the server."""
from __future__ import annotations

import logging
from pathlib import Path

import click

from ..bounds import MAX_BATCH_SIZE, MAX_THREADS
from .batching import MAX_WORKERS, BatchConfig
from .process import run_server
from .settings import Limits, ServeOptions, Timeouts

_L, _T = Limits(), Timeouts()


@click.command("serve")
@click.argument("model_dir", metavar="DIR", type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 opens it to the network).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0 = any free port, printed at start).")
@click.option("--max-batch-size", default=32, show_default=True,
              type=click.IntRange(1, MAX_BATCH_SIZE),
              help="Most inputs merged into one model call; a request's inputs are queued "
                   "in parts of this size, one part at a time.")
@click.option("--max-wait-ms", default=5.0, show_default=True, type=click.FloatRange(0, 60_000),
              help="Longest a request waits for others to batch with.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, MAX_WORKERS),
              help="Model calls run at once (threads sharing one onnxruntime session).")
@click.option("--max-body-bytes", default=_L.max_body_bytes, show_default=True,
              type=click.IntRange(1), help="Largest request body (413).")
@click.option("--max-inputs", default=_L.max_inputs, show_default=True, type=click.IntRange(1),
              help="Most inputs in one request (413).")
@click.option("--max-tokens", default=_L.max_tokens, show_default=True, type=click.IntRange(1),
              help="Most tokens the model runs for one request, every window of a long "
                   "input counted (413).")
@click.option("--max-context-chars", default=_L.max_context_chars, show_default=True,
              type=click.IntRange(1),
              help="Most characters of QA contexts / token-classification texts in one "
                   "request, checked before they are tokenized (413).")
@click.option("--max-answers", default=_L.max_answers, show_default=True,
              type=click.IntRange(1),
              help="Most answers one request asks for: fill-mask top_k × masks, QA top_k × "
                   "questions (400).")
@click.option("--max-connections", default=ServeOptions.max_connections, show_default=True,
              type=click.IntRange(1),
              help="Open connections at once; past it a new one gets 503 at connect.")
@click.option("--header-timeout-s", default=_T.header_s, show_default=True,
              type=click.FloatRange(0, 86_400, min_open=True),
              help="Seconds for a request's headers to arrive (else 408, closed).")
@click.option("--body-timeout-s", default=_T.body_s, show_default=True,
              type=click.FloatRange(0, 86_400, min_open=True),
              help="Seconds for a request's body to arrive after its headers (else 408).")
@click.option("--keep-alive-s", default=_T.keep_alive_s, show_default=True,
              type=click.FloatRange(0, 86_400, min_open=True),
              help="Seconds an idle keep-alive connection stays open.")
@click.option("--drain-timeout-s", default=_T.drain_s, show_default=True,
              type=click.FloatRange(0, 86_400, min_open=True),
              help="On SIGTERM, seconds to answer what was received; the rest get 503 and "
                   "the exit status is 1.")
@click.option("--threads", default=None, type=click.IntRange(0, MAX_THREADS),
              help="onnxruntime intra-op threads per call [default: onnxruntime's].")
@click.option("--providers", default=None, help="onnxruntime providers, e.g. cuda,cpu.")
@click.option("--name", default=None,
              help="The model's name on /v1/models and /v2/models/NAME [default: DIR's "
                   "folder name].")
@click.pass_context
def serve(ctx, model_dir, host, port, max_batch_size, max_wait_ms, workers, max_body_bytes,
          max_inputs, max_tokens, max_context_chars, max_answers, max_connections,
          header_timeout_s, body_timeout_s, keep_alive_s, drain_timeout_s, threads, providers,
          name):
    """Serve the export in DIR over HTTP: POST /predict, GET /health, GET /metrics; OpenAI's
    POST /v1/embeddings (feature-extraction) and GET /v1/models; the Open Inference Protocol
    v2 (KServe, Triton: /v2/models/NAME/infer)."""
    debug = bool((ctx.find_root().obj or {}).get("debug"))
    options = ServeOptions(
        host=host, port=port, batch=BatchConfig(max_batch_size, max_wait_ms, workers),
        limits=Limits(max_body_bytes, max_inputs, max_tokens, max_context_chars, max_answers),
        timeouts=Timeouts(header_timeout_s, body_timeout_s, keep_alive_s, drain_timeout_s),
        max_connections=max_connections, threads=threads, providers=providers, name=name)
    logging.getLogger("bertonnx").setLevel(logging.INFO)
    return run_server(model_dir, options, log_level="debug" if debug else "warning",
                      announce=lambda line: click.echo(line, err=True))
