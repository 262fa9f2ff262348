"""`bertonnx serve`: click maps flags onto ServeOptions (and RayOptions with --ray) and runs
the server, or deploys it on a Ray cluster."""
from __future__ import annotations

import logging
from pathlib import Path

import click

from ..core.bounds import MAX_BATCH_SIZE, MAX_THREADS
from ..core.errors import ConfigError
from .batching import MAX_WORKERS, BatchConfig
from .settings import (LONG_INPUTS, Access, Backpressure, Limits, RayOptions, ServeOptions,
                       Timeouts, check_name, read_key_file)

_L, _T = Limits(), Timeouts()
KEY_ENV = "BERTONNX_API_KEY"


class _ApiKey(click.ParamType):
    """An API key; from the environment, a comma-separated list of them."""

    name = "KEY"
    envvar_list_splitter = ","

    def convert(self, value, param, ctx):
        return value.strip()


def _access_flags(command):
    """Who may call the server, over what, and how much work it holds (settings.Access,
    settings.Backpressure): what a server on a network needs (docs/serving.md, Production)."""
    pem = click.Path(exists=True, dir_okay=False, readable=True)
    flags = [
        click.option("--api-key", "api_keys", multiple=True, type=_ApiKey(), envvar=KEY_ENV,
                     show_envvar=True,
                     help="Require `Authorization: Bearer KEY` on every route but /health and "
                          "the v2 live/ready probes (401 otherwise). Repeat for several keys; "
                          f"without the flag, ${KEY_ENV} is read (one key, or several "
                          "comma-separated), which keeps keys off the process list."),
        click.option("--api-key-file", default=None, type=pem, metavar="PATH",
                     help="Also accept the keys in this file, one a line (# comments)."),
        click.option("--ssl-certfile", default=None, type=pem, metavar="PEM",
                     help="Serve HTTPS with this certificate (chain); needs --ssl-keyfile."),
        click.option("--ssl-keyfile", default=None, type=pem, metavar="PEM",
                     help="The certificate's private key (unencrypted PEM)."),
        click.option("--ssl-ca-certs", default=None, type=pem, metavar="PEM",
                     help="Require client certificates signed by these CAs (mutual TLS)."),
        click.option("--max-queued-inputs", default=None, type=click.IntRange(1),
                     help="Inputs held for the model at once, across requests (queued or "
                          "running); past it a request gets 429 with Retry-After before it is "
                          "tokenized. A request to an idle server always runs "
                          "[default: 4 × --max-batch-size × --workers, at least 2 × "
                          "--max-inputs]."),
        click.option("--request-timeout-s", default=Backpressure.request_timeout_s,
                     show_default=True, type=click.FloatRange(0, 86_400, min_open=True),
                     help="A request not answered this long after it arrived gets 503 with "
                          "Retry-After; its work not yet started is dropped, not computed. "
                          "With --ray, Serve's deadline too."),
    ]
    for flag in reversed(flags):
        command = flag(command)
    return command


def _ray_flags(command):
    """The flags of `serve --ray`: the same app as a Ray Serve deployment (ray_serve.py)."""
    flags = [
        click.option("--ray", "ray_address", default=None, metavar="ADDRESS|auto",
                     help="Run as a Ray Serve deployment on this Ray cluster (HOST:PORT of "
                          "its head, or auto); needs the ray extra."),
        click.option("--replicas", default=1, show_default=True, type=click.IntRange(1),
                     help="With --ray: model replicas, each with its own dynamic batching "
                          "(the first count when autoscaling)."),
        click.option("--min-replicas", default=None, type=click.IntRange(1),
                     help="With --ray: autoscale between --min-replicas and --max-replicas."),
        click.option("--max-replicas", default=None, type=click.IntRange(1),
                     help="With --ray: the autoscaling upper bound."),
        click.option("--replica-cpus", default=1.0, show_default=True,
                     type=click.FloatRange(0, min_open=True),
                     help="With --ray: Ray CPUs each replica reserves (and its onnxruntime "
                          "threads unless --threads is given)."),
        click.option("--max-ongoing-requests", default=None, type=click.IntRange(1),
                     help="With --ray: requests one replica holds at once; the rest queue "
                          "[default: 2 × --max-batch-size]."),
        click.option("--deploy-timeout-s", default=RayOptions.deploy_timeout_s,
                     show_default=True, type=click.FloatRange(0, 86_400, min_open=True),
                     help="With --ray: the replicas must be up (models loaded) within this, "
                          "or the command stops saying what the cluster lacks."),
    ]
    for flag in reversed(flags):
        command = flag(command)
    return command


# Flags of the plain server's own connection handling; under --ray, Ray's proxy holds the
# connections, so setting one there is refused rather than ignored.
_NOT_ON_RAY = ("max_connections", "header_timeout_s", "ssl_certfile", "ssl_keyfile",
               "ssl_ca_certs")


def _triton_flags(command):
    """The flags of `serve --engine triton`: the export on the bundled Triton server
    (runtime/triton/serve.py; the triton extra)."""
    flags = [
        click.option("--engine", type=click.Choice(["bertonnx", "triton"]), default="bertonnx",
                     show_default=True,
                     help="bertonnx's own server, or a real Triton Inference Server (the "
                          "triton extra) running the export in its Python backend; Triton "
                          "takes --port (default 8000), gRPC on port + 1, metrics on port + 2."),
        click.option("--grpc-port", default=None, type=click.IntRange(1, 65535),
                     help="With --engine triton: the gRPC port [default: --port + 1]."),
        click.option("--metrics-port", default=None, type=click.IntRange(1, 65535),
                     help="With --engine triton: the metrics port [default: --port + 2]."),
        click.option("--instances", default=1, show_default=True, type=click.IntRange(1, 64),
                     help="With --engine triton: model instances (instance_group count), each "
                          "its own process."),
        click.option("--triton-python", default=None, metavar="PYTHON",
                     help="With --engine triton: the Python Triton's stub runs the model in "
                          "(needs numpy<2 and bertonnx) [default: this one]."),
    ]
    for flag in reversed(flags):
        command = flag(command)
    return command


# What --engine triton takes of serve's own flags (the rest are bertonnx's server's)
_ON_TRITON = frozenset({"model_dirs", "host", "port", "max_batch_size", "max_wait_ms", "threads",
                        "names", "engine", "grpc_port", "metrics_port", "instances",
                        "triton_python"})
_TRITON_ONLY = ("grpc_port", "metrics_port", "instances", "triton_python")
# where Triton's own mechanism is what the user wants (docs/serving.md, Production)
_KEYS_ON_TRITON = (": Triton guards its APIs with a header of its own (tritonserver "
                   "--http-restricted-api / --grpc-restricted-protocol), see docs/serving.md")
_TLS_ON_TRITON = ": put a TLS-terminating proxy in front of Triton's HTTP port"
_TRITON_HINTS = {"api_keys": _KEYS_ON_TRITON, "api_key_file": _KEYS_ON_TRITON,
                 "ssl_certfile": _TLS_ON_TRITON, "ssl_keyfile": _TLS_ON_TRITON,
                 "ssl_ca_certs": _TLS_ON_TRITON}


@click.command("serve")
@click.argument("model_dirs", metavar="DIR [DIR ...]", nargs=-1, required=True,
                type=click.Path(file_okay=False, path_type=Path))
@click.option("--host", default="127.0.0.1", show_default=True,
              help="Address to listen on (0.0.0.0 opens it to the network).")
@click.option("--port", default=8080, show_default=True, type=click.IntRange(0, 65535),
              help="Port (0 = any free port, printed at start).")
@click.option("--max-batch-size", default=BatchConfig.max_batch_size,
              type=click.IntRange(1, MAX_BATCH_SIZE),
              help="Most inputs merged into one model call, from several requests' parts "
                   f"[default: {BatchConfig.max_batch_size}; with --engine triton, the Triton "
                   "model's own default].")
@click.option("--part-size", default=BatchConfig.part_size, show_default=True,
              type=click.IntRange(1, MAX_BATCH_SIZE),
              help="A request's inputs are queued in parts of at most this many (and of "
                   "--max-batch-size), one part at a time: a small request beside a large "
                   "one waits for one part of it.")
@click.option("--max-wait-ms", default=5.0, show_default=True, type=click.FloatRange(0, 60_000),
              help="Longest a request waits for others to batch with.")
@click.option("--workers", default=1, show_default=True, type=click.IntRange(1, MAX_WORKERS),
              help="Model calls run at once on one session, --threads split between them.")
@click.option("--max-body-bytes", default=_L.max_body_bytes, show_default=True,
              type=click.IntRange(1), help="Largest request body (413).")
@click.option("--max-inputs", default=_L.max_inputs, show_default=True, type=click.IntRange(1),
              help="Most inputs in one request (413).")
@click.option("--max-tokens", default=_L.max_tokens, show_default=True, type=click.IntRange(1),
              help="Most tokens the model runs for one request, every window of a long "
                   "input counted (413).")
@click.option("--long-inputs", default=ServeOptions.long_inputs, show_default=True,
              type=click.Choice(LONG_INPUTS),
              help="A text past the model's length in a TEI /embed request with truncate false: "
                   "refuse it (422, as TEI), or chunk it (overlapping windows pooled into one "
                   "vector; the x-windows header counts each input's).")
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
@click.option("--providers", default=None, metavar="ENGINE",
              help="Engine: auto (default: the fastest this CPU has that the export proved), "
                   "cpu, openvino, openvino:bf16, openvino:f32, cuda, or providers as a list.")
@click.option("--name", "names", multiple=True,
              help="The model's name on /v1/models, /v2/models/NAME and in `model` fields "
                   "[default: DIR's folder name]; with several DIRs, once per DIR, in order.")
@click.option("--max-model-calls", default=None, type=click.IntRange(1),
              help="Model calls at once across every model served [default: --workers, one "
                   "more with several DIRs, so a busy model leaves a call to the others].")
@_access_flags
@_triton_flags
@_ray_flags
@click.pass_context
def serve(ctx, model_dirs, host, port, max_batch_size, part_size, max_wait_ms, workers,
          max_body_bytes, max_inputs, max_tokens, long_inputs, max_context_chars, max_answers,
          max_connections, header_timeout_s, body_timeout_s, keep_alive_s, drain_timeout_s,
          threads, providers, names, max_model_calls, api_keys, api_key_file, ssl_certfile,
          ssl_keyfile, ssl_ca_certs, max_queued_inputs, request_timeout_s, engine, grpc_port, metrics_port,
          instances, triton_python, ray_address, **ray_flags):
    """Serve the export in DIR over HTTP: POST /predict, GET /health, GET /metrics; OpenAI's
    POST /v1/embeddings (feature-extraction) and GET /v1/models; the Open Inference Protocol
    v2 (KServe, Triton: /v2/models/NAME/infer). Several DIRs: one server, one session each,
    requests routed by `model` (docs/serving.md).

    With --ray, the same app runs as a Ray Serve deployment of --replicas replicas on a
    running Ray cluster, each with its own dynamic batching. With --engine triton, a real
    Triton server runs the export (raw text in, the task's answers out)."""
    models = _named(ctx, model_dirs, names)
    name = names[0] if len(model_dirs) == 1 and names else None
    model_dir = model_dirs[0]
    if engine == "triton":
        return _serve_on_triton(ctx, model_dir if len(models) == 1 else models, host, port,
                                max_batch_size, max_wait_ms, threads, name, grpc_port,
                                metrics_port, instances, triton_python)
    for flag in _TRITON_ONLY:
        if ctx.get_parameter_source(flag) is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError(f"--{flag.replace('_', '-')} needs --engine triton", ctx)
    debug = bool((ctx.find_root().obj or {}).get("debug"))
    options = ServeOptions(
        host=host, port=port, batch=BatchConfig(max_batch_size, max_wait_ms, workers,
                                                 part_size),
        limits=Limits(max_body_bytes, max_inputs, max_tokens, max_context_chars, max_answers),
        timeouts=Timeouts(header_timeout_s, body_timeout_s, keep_alive_s, drain_timeout_s),
        backpressure=Backpressure(max_queued_inputs, request_timeout_s),
        access=Access(tuple(k for k in api_keys if k)
                      + (read_key_file(api_key_file) if api_key_file else ()),
                      ssl_certfile, ssl_keyfile, ssl_ca_certs),
        max_connections=max_connections, threads=threads, providers=providers, name=name,
        long_inputs=long_inputs, max_model_calls=max_model_calls)
    logging.getLogger("bertonnx").setLevel(logging.INFO)
    if ray_address is not None:
        return _serve_on_ray(ctx, model_dir if len(models) == 1 else models, options,
                             RayOptions(ray_address, request_timeout_s=request_timeout_s,
                                        **ray_flags))
    for flag in ray_flags:
        if ctx.get_parameter_source(flag) is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError(f"--{flag.replace('_', '-')} needs --ray ADDRESS", ctx)
    # starlette and uvicorn (the serve extra) only once the server runs: `serve --help` stays light
    from .process import run_server

    return run_server(model_dir if len(models) == 1 else models, options,
                      log_level="debug" if debug else "warning",
                      announce=lambda line: click.echo(line, err=True))


def _named(ctx, model_dirs: tuple[Path, ...], names: tuple[str, ...]) -> list[tuple[str, Path]]:
    """(name, folder) per DIR: --name once per DIR in order, else each folder's name."""
    if names and len(names) != len(model_dirs):
        raise click.UsageError(f"--name is given {len(names)} time(s) for {len(model_dirs)} "
                               "DIR(s): give it once per DIR, in order, or not at all", ctx)
    named = list(zip(names or [Path(d).resolve().name for d in model_dirs], model_dirs))
    for name, _ in named:
        check_name(name)   # a folder's name too: it goes into URL paths
    seen = [n for n, _ in named]
    twice = sorted({n for n in seen if seen.count(n) > 1})
    if twice:
        raise click.UsageError(f"two models would be named {twice[0]!r}: give each DIR its own "
                               "--name, in order", ctx)
    return named


def _serve_on_ray(ctx, model_dir, options: ServeOptions, ray_options: RayOptions) -> int:
    for name in _NOT_ON_RAY:
        if ctx.get_parameter_source(name) is not click.core.ParameterSource.DEFAULT:
            raise click.UsageError(f"--{name.replace('_', '-')} does not apply with --ray: "
                                   "Ray Serve's proxy holds the connections", ctx)
    try:  # ray is an extra: imported only with --ray, and it may be absent
        from .ray_serve import serve_on_ray
    except ImportError as e:
        if (e.name or "ray").partition(".")[0] != "ray":
            raise
        raise ConfigError("--ray needs the ray extra", "pip install 'bertonnx[ray]'") from None
    return serve_on_ray(model_dir, options, ray_options,
                        announce=lambda line: click.echo(line, err=True))


def _serve_on_triton(ctx, model_dir, host, port, max_batch_size, max_wait_ms, threads, name,
                     grpc_port, metrics_port, instances, triton_python) -> int:
    for param in ctx.command.params:
        if (param.name not in _ON_TRITON and ctx.get_parameter_source(param.name)
                is not click.core.ParameterSource.DEFAULT):
            hint = _TRITON_HINTS.get(param.name, "")
            raise click.UsageError(f"{param.opts[0]} does not apply with --engine triton{hint}",
                                   ctx)
    # the triton package (and tempfile, urllib) only for --engine triton: `serve` stays light
    from ..triton.serve import TritonServeOptions, serve_triton

    if ctx.get_parameter_source("port") is click.core.ParameterSource.DEFAULT:
        port = TritonServeOptions.port  # Triton's own 8000 (8001 gRPC, 8002 metrics)
    if ctx.get_parameter_source("max_batch_size") is click.core.ParameterSource.DEFAULT:
        # Triton's dynamic batcher keeps its own default: the wider call was measured on
        # bertonnx's batcher only
        max_batch_size = TritonServeOptions.max_batch_size
    return serve_triton(model_dir, TritonServeOptions(
        host=host, port=port, grpc_port=grpc_port, metrics_port=metrics_port, name=name,
        max_batch_size=max_batch_size, max_wait_ms=max_wait_ms, instances=instances,
        threads=threads, python=triton_python), announce=lambda line: click.echo(line, err=True))
