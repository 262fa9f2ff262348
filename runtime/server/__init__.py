"""`bertonnx serve`: an export folder (or several, one session each, requests routed by their
`model`: registry.py) behind an HTTP JSON API, with dynamic batching.

Starlette on uvicorn (the optional `serve` extra; nothing else in the runtime imports them).

    POST /predict   {"inputs": ..., "parameters": {...}}  -> exactly the pipeline's output JSON
    GET  /health    503 while the model loads, 200 once it answers
    GET  /metrics   Prometheus text: requests by status, latency, batch sizes, queue depth
    POST /v1/embeddings, GET /v1/models            OpenAI's embeddings API (openai.py)
    /v2, /v2/health/*, /v2/models/{name}[/ready|/infer]   Open Inference Protocol v2 (v2.py)
    POST /embed, /rerank, /embed_sparse, /tokenize, GET /info   TEI's API (tei*.py)
    POST /v2/rerank, /v2/embed                      Cohere's rerank and embed (cohere.py)
    GET  /openapi.json, /docs                       OpenAPI 3.1 and Swagger UI (openapi.py)

The request convention is Hugging Face's inference API: `inputs` is a text, a list of texts,
a {"text", "text_pair"} pair (classification) or a {"question", "context"} object (QA), or a
list of those; `parameters` are the pipeline's keyword arguments. Concurrent requests with
identical parameters are merged into one pipeline call by `batching.DynamicBatcher`.

Errors are JSON `{"error": ..., "type": ...}`: 400 for malformed JSON, wrong shapes, unknown or
bad parameters (named, checked by type and range by the task's own table) and too many answers,
401 without a key of --api-key (every route but the probes; auth.py), 408 for headers or bodies
too slow, 413 past a size limit (body, inputs, tokens, context characters; each names its flag),
429 past --max-queued-inputs, 503 while loading, past --max-connections, past
--request-timeout-s, or when the drain timeout cuts a request; a 500 names an id that is in the
server log and never carries a traceback. A client that hangs up is counted apart (never a
5xx) and its queued work is dropped. SIGTERM stops accepting connections, answers every request
already received, and exits 0 — or 1 if --drain-timeout-s cut some (they got 503).

Files: settings.py (ServeOptions, Limits, Timeouts, Backpressure, Access), auth.py (API keys),
protocol.py (requests in, JSON out, client errors, limits), batching.py (the dynamic batcher),
metrics.py (Prometheus text), registry.py (the models served and which one a request is
for), app.py (the Starlette app and its route table), endpoints.py (a
route's record: the tasks that serve it, its OpenAPI entry), wire.py (how an inference route
reads requests and writes answers; /predict's, openai.py's, v2.py's; each task's v2 tensors are
its pipeline's), connections.py (header deadline and connection cap on uvicorn's h11 protocol),
process.py (socket + descriptor limit + uvicorn and its TLS + signals), commands.py (the click
command); with `--ray ADDRESS`, ray_serve.py (the app as a Ray Serve deployment, the `ray`
extra) and relay.py (one HTTP exchange carried to a replica and played into the app).
"""
from .protocol import ClientError, allowed_parameters, parse_request
from .settings import Limits, RayOptions, ServeOptions, Timeouts

__all__ = ["ClientError", "Limits", "RayOptions", "ServeOptions", "Timeouts",
           "allowed_parameters", "bind", "create_app", "parse_request", "run_server"]


# app.py and process.py import starlette and uvicorn (the serve extra): they are imported when
# first asked for, so this package, which holds the `serve` command, stays light (`serve --help`)
def __getattr__(name: str):
    if name == "create_app":
        from .app import create_app  # starlette: see above

        return create_app
    if name in ("bind", "run_server"):
        from . import process  # starlette and uvicorn: see above

        return getattr(process, name)
    raise AttributeError(name)
