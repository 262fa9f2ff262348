"""`bertonnx serve`: an export folder behind an HTTP JSON API, with dynamic batching.

Starlette on uvicorn (the optional `serve` extra; nothing else in the runtime imports them).

    POST /predict   {"inputs": ..., "parameters": {...}}  -> exactly the pipeline's output JSON
    GET  /health    503 while the model loads, 200 once it answers
    GET  /metrics   Prometheus text: requests by status, latency, batch sizes, queue depth

The request convention is Hugging Face's inference API: `inputs` is a text, a list of texts,
a {"text", "text_pair"} pair (classification) or a {"question", "context"} object (QA), or a
list of those; `parameters` are the pipeline's keyword arguments. Concurrent requests with
identical parameters are merged into one pipeline call by `batching.DynamicBatcher`.

Errors are JSON `{"error": ..., "type": ...}`: 400 for malformed JSON, wrong shapes, unknown or
bad parameters, 413 for bodies past --max-body-bytes, 503 while loading; a 500 names an id
that is in the server log and never carries a traceback. SIGTERM stops accepting connections,
answers every request already received, and exits 0.

Files: settings.py (ServeOptions), protocol.py (requests in, JSON out, client errors),
batching.py (the dynamic batcher), metrics.py (Prometheus text), app.py (the Starlette app),
process.py (socket + uvicorn + signals), commands.py (the click command).
"""
from .app import create_app
from .process import bind, run_server
from .protocol import ClientError, allowed_parameters, parse_request
from .settings import ServeOptions

__all__ = ["ClientError", "ServeOptions", "allowed_parameters", "bind", "create_app",
           "parse_request", "run_server"]
