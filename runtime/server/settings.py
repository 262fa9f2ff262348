"""`bertonnx serve`'s options, typed records the CLI and `create_app` share.

Every limit has a default, a flag, and a refusal that names both (413 for requests too large,
400 for answers too many, 408 for bodies too slow, 503 for connections past the cap, 429 for
work past the queue's cap, 503 for a request past its deadline). `Access` is who may call
(API keys) and over what (TLS).
"""
from __future__ import annotations

import re
import ssl
from dataclasses import dataclass, field
from pathlib import Path

from ..core.errors import InputError
from ..core.parameters import MAX_TOP_K
from .batching import BatchConfig


@dataclass(frozen=True)
class Limits:
    """What one request may ask for. The flag of each field is `--` + its name with dashes."""

    max_body_bytes: int = 1 << 20        # 1 MiB of JSON is ~ a few hundred contexts (413)
    max_inputs: int = 256                # inputs per request (413)
    # tokens the model runs for one request, every window of a long input at its length, as
    # `Pipeline.work` counts them: bounds the time one request can hold a worker (413)
    max_tokens: int = 32_768
    # characters of QA contexts / token-classification texts per request: those are tokenized
    # whole (~0.5 kB of tokenizer state per character), so they are capped before (413)
    max_context_chars: int = 100_000
    # answers one request may ask for: fill-mask top_k × masks (each a decoded sequence),
    # question-answering top_k × questions (400); by default the records' top_k bound, so one
    # input at that bound fits (runtime/core/parameters.py MAX_TOP_K)
    max_answers: int = MAX_TOP_K

    def __post_init__(self):
        for name, value in vars(self).items():
            if not isinstance(value, int) or value < 1:
                raise InputError(f"{flag(name)} must be ≥ 1, got {value!r}",
                                 f"pass {flag(name)} 1 or more")


@dataclass(frozen=True)
class Timeouts:
    """How long the server waits on a client, and on its own drain."""

    header_s: float = 10.0      # connect (or a new request's first byte) -> end of headers (408)
    body_s: float = 30.0        # end of headers -> end of body (408, connection closed)
    keep_alive_s: float = 5.0   # an idle keep-alive connection is closed after this
    drain_s: float = 30.0       # SIGTERM -> requests still unanswered get 503, exit status 1

    def __post_init__(self):
        for name, value in vars(self).items():
            if not isinstance(value, (int, float)) or not 0 < value <= 86_400:
                raise InputError(f"{flag(name)} must be in (0, 86400] seconds, got {value!r}",
                                 f"pass e.g. {flag(name)} 30")


def flag(field: str) -> str:
    """The CLI flag of a Limits / Timeouts field: max_tokens -> --max-tokens, header_s ->
    --header-timeout-s, keep_alive_s -> --keep-alive-s, drain_s -> --drain-timeout-s."""
    names = {"header_s": "header-timeout-s", "body_s": "body-timeout-s",
             "keep_alive_s": "keep-alive-s", "drain_s": "drain-timeout-s"}
    return "--" + names.get(field, field.replace("_", "-"))


@dataclass(frozen=True)
class Backpressure:
    """How much work the server holds at once, and for how long (app.py `_Handlers.admit`)."""

    # inputs of admitted requests not yet answered (queued or running), across requests; past
    # it a request is answered 429 + Retry-After before its inputs are tokenized. None: four
    # full batches per worker, and room for two maximal requests (`cap`). A request arriving
    # at an idle server is always admitted, so one of --max-inputs runs whatever the cap
    max_queued_inputs: int | None = None
    # a request not answered this long after it arrived gets 503 + Retry-After; its parts not
    # yet started are dropped, never computed. 60 s is nginx's default proxy_read_timeout (a
    # proxy in front has given up by then) and Ray Serve's deadline here (RayOptions)
    request_timeout_s: float = 60.0

    def __post_init__(self):
        if self.max_queued_inputs is not None and (
                not isinstance(self.max_queued_inputs, int) or self.max_queued_inputs < 1):
            raise InputError(f"--max-queued-inputs must be ≥ 1, got {self.max_queued_inputs!r}",
                             "pass e.g. --max-queued-inputs 512")
        if not isinstance(self.request_timeout_s, (int, float)) or not (
                0 < self.request_timeout_s <= 86_400):
            raise InputError(f"--request-timeout-s must be in (0, 86400] seconds, got "
                             f"{self.request_timeout_s!r}", "pass e.g. --request-timeout-s 60")

    def cap(self, batch: BatchConfig, limits: Limits) -> int:
        """--max-queued-inputs, or by default 4 × --max-batch-size × --workers (each worker
        has a batch running and three waiting) and at least 2 × --max-inputs (a maximal
        request leaves room for others: a small one is served between its parts)."""
        if self.max_queued_inputs is not None:
            return self.max_queued_inputs
        return max(4 * batch.max_batch_size * batch.workers, 2 * limits.max_inputs)


# What an API key may hold: it travels in a header (`Authorization: Bearer KEY`), so visible
# ASCII without spaces; 8 characters at least, so a typo such as `--api-key $UNSET` (empty) or a
# short test string is not mistaken for a secret.
_KEY = re.compile(r"[\x21-\x7e]{8,4096}")


@dataclass(frozen=True)
class Access:
    """Who may call the server and over what. `api_keys`: any of them, sent as `Authorization:
    Bearer KEY`, opens every route but /health and the v2 live/ready probes (none: no key
    asked). The ssl files go to uvicorn (ssl_certfile, ssl_keyfile, ssl_ca_certs): with
    `ssl_ca_certs` a client must present a certificate signed by those CAs (mutual TLS)."""

    api_keys: tuple[str, ...] = field(default=(), repr=False)   # never in a log line
    ssl_certfile: str | None = None
    ssl_keyfile: str | None = None
    ssl_ca_certs: str | None = None

    def __post_init__(self):
        for key in self.api_keys:
            if not isinstance(key, str) or not _KEY.fullmatch(key):
                raise InputError("an API key must be 8 or more visible ASCII characters, no "
                                 f"spaces (got one of {len(key)} characters)",
                                 "pass --api-key with a random key, e.g. `openssl rand -hex 32`")
        if (self.ssl_certfile is None) != (self.ssl_keyfile is None):
            given, missing = (("--ssl-certfile", "--ssl-keyfile") if self.ssl_keyfile is None
                              else ("--ssl-keyfile", "--ssl-certfile"))
            raise InputError(f"{given} needs {missing}", "pass both the certificate and its "
                             "private key (PEM files), or neither")
        if self.ssl_ca_certs is not None and self.ssl_certfile is None:
            raise InputError("--ssl-ca-certs (client certificates) needs TLS",
                             "pass --ssl-certfile and --ssl-keyfile too")

    @property
    def tls(self) -> bool:
        return self.ssl_certfile is not None

    def check_tls(self) -> None:
        """The certificate, its key and the CA file load (InputError naming the file and what
        is wrong): checked before the server binds, not at its first connection."""
        if not self.tls:
            return
        for flag_, path in (("--ssl-certfile", self.ssl_certfile),
                            ("--ssl-keyfile", self.ssl_keyfile),
                            ("--ssl-ca-certs", self.ssl_ca_certs)):
            if path is not None and not Path(path).is_file():
                raise InputError(f"{flag_} {path}: no such file", "pass the path of a PEM file")
        context = ssl.SSLContext(ssl.PROTOCOL_TLS_SERVER)
        try:
            # an encrypted key would make OpenSSL prompt on the terminal: no password, refused
            context.load_cert_chain(self.ssl_certfile, self.ssl_keyfile, password=lambda: b"")
        except (ssl.SSLError, OSError) as e:
            raise InputError(f"cannot use --ssl-certfile {self.ssl_certfile} with --ssl-keyfile "
                             f"{self.ssl_keyfile}: {getattr(e, 'strerror', None) or e}",
                             "pass a PEM certificate and the private key it was made with "
                             "(an encrypted key is not supported)") from None
        if self.ssl_ca_certs is not None:
            try:
                context.load_verify_locations(self.ssl_ca_certs)
            except (ssl.SSLError, OSError) as e:
                raise InputError(f"cannot read --ssl-ca-certs {self.ssl_ca_certs}: "
                                 f"{getattr(e, 'strerror', None) or e}",
                                 "pass a PEM file of CA certificates") from None


def read_key_file(path: str | Path) -> tuple[str, ...]:
    """The API keys in a file: one a line; blank lines and lines starting with # are skipped.
    InputError when it holds none."""
    try:
        text = Path(path).read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as e:
        raise InputError(f"cannot read --api-key-file {path}: {getattr(e, 'strerror', None) or e}",
                         "pass a readable UTF-8 file with one key a line") from None
    keys = tuple(line.strip() for line in text.splitlines()
                 if line.strip() and not line.lstrip().startswith("#"))
    if not keys:
        raise InputError(f"--api-key-file {path} holds no key", "write one key a line")
    return keys


@dataclass(frozen=True)
class ServeOptions:
    host: str = "127.0.0.1"                  # loopback unless the user opens it up
    port: int = 8080                         # 0 = any free port (printed at start)
    batch: BatchConfig = BatchConfig()
    limits: Limits = Limits()
    timeouts: Timeouts = Timeouts()
    backpressure: Backpressure = Backpressure()
    access: Access = Access()
    # open connections at once; past it a new one is answered 503 and closed at connect.
    # The process's file-descriptor limit is raised to fit it (or the server refuses to start)
    max_connections: int = 1_000
    threads: int | None = None               # onnxruntime intra-op threads per call
    providers: str | None = None             # the engine: auto, cpu, openvino:bf16 (engines.py)
    # the model's name on /v1/models and /v2/models/{name} (None: the export folder's name)
    name: str | None = None
    # a text past the model with TEI's truncate false: refused (TEI's 422) or windowed into
    # one vector (feature-extraction's long_inputs="chunk"); LONG_INPUTS
    long_inputs: str = "refuse"
    # model calls at once across every model served (None: --workers, one more when several
    # models are served, so one model busy on all its workers leaves a slot for the others)
    max_model_calls: int | None = None

    def __post_init__(self):
        if not isinstance(self.max_connections, int) or self.max_connections < 1:
            raise InputError(f"--max-connections must be ≥ 1, got {self.max_connections!r}",
                             "pass e.g. --max-connections 1000")
        if self.long_inputs not in LONG_INPUTS:
            raise InputError(f"--long-inputs must be one of {', '.join(LONG_INPUTS)}, got "
                             f"{self.long_inputs!r}", "pass --long-inputs chunk, or leave it out")
        if self.name is not None:
            check_name(self.name)
        if self.max_model_calls is not None and (not isinstance(self.max_model_calls, int)
                                                 or self.max_model_calls < 1):
            raise InputError(f"--max-model-calls must be ≥ 1, got {self.max_model_calls!r}",
                             "pass e.g. --max-model-calls 2")

    def model_calls(self, models: int) -> int:
        """The shared bound on model calls at once for `models` models served."""
        if self.max_model_calls is not None:
            return self.max_model_calls
        return self.batch.workers + (models > 1)


def check_name(name: str) -> str:
    """`name` if it can name a model (it goes into URL paths), else InputError."""
    if not _NAME.fullmatch(name):
        raise InputError(f"--name {name!r} is not a model name: it goes into URL paths "
                         "(/v2/models/NAME)", "use letters, digits and . _ - : (at most "
                         "200), e.g. --name minilm")
    return name


# What a request that asks not to truncate gets for a text past the model's length.
LONG_INPUTS = ("refuse", "chunk")

# A model name: one URL path segment that needs no quoting.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")


@dataclass(frozen=True)
class RayOptions:
    """`bertonnx serve DIR --ray ADDRESS`: the same app as a Ray Serve deployment, one
    dynamic batcher per replica (runtime/server/ray_serve.py)."""

    address: str                        # a running cluster's "host:port", or "auto"
    replicas: int = 1                   # fixed count, or the first count when autoscaling
    min_replicas: int | None = None     # either bound set: Serve autoscales between them
    max_replicas: int | None = None
    replica_cpus: float = 1.0           # Ray CPUs each replica reserves (and its ORT threads)
    # requests one replica holds at once (None: 2 × max_batch_size, so a full batch can
    # form while another runs); beyond it Serve queues them for the next free replica
    max_ongoing_requests: int | None = None
    # a request not answered within this (replicas dead or all busy) gets 503
    request_timeout_s: float = 60.0
    # the application must run (every replica's model loaded) within this, or the command
    # stops with what the cluster lacks (replicas that fit on no node would wait for ever)
    deploy_timeout_s: float = 300.0
    attempts: int = 3                   # tries of a request whose replica died under it
    name: str = "bertonnx"              # the Serve application's name

    def __post_init__(self):
        if not self.address:
            raise InputError("--ray needs a cluster address",
                             "pass --ray auto or --ray HOST:PORT")
        if not isinstance(self.replicas, int) or self.replicas < 1:
            raise InputError(f"--replicas must be ≥ 1, got {self.replicas!r}",
                             "pass --replicas 1")
        if self.autoscaling:
            low, high = self.bounds
            if not 1 <= low <= high:
                raise InputError(f"--min-replicas {low} and --max-replicas {high} must satisfy "
                                 "1 ≤ min ≤ max", "pass e.g. --min-replicas 1 --max-replicas 4")
        if not self.replica_cpus > 0:
            raise InputError(f"--replica-cpus must be > 0, got {self.replica_cpus!r}",
                             "pass e.g. --replica-cpus 1")
        if self.max_ongoing_requests is not None and self.max_ongoing_requests < 1:
            raise InputError(f"--max-ongoing-requests must be ≥ 1, got "
                             f"{self.max_ongoing_requests!r}",
                             "pass e.g. --max-ongoing-requests 64")
        if not 0 < self.request_timeout_s <= 86_400:
            raise InputError(f"--request-timeout-s must be in (0, 86400], got "
                             f"{self.request_timeout_s!r}", "pass e.g. --request-timeout-s 60")
        if not 0 < self.deploy_timeout_s <= 86_400:
            raise InputError(f"--deploy-timeout-s must be in (0, 86400], got "
                             f"{self.deploy_timeout_s!r}", "pass e.g. --deploy-timeout-s 300")
        if self.attempts < 1:
            raise InputError(f"attempts must be ≥ 1, got {self.attempts!r}")

    @property
    def autoscaling(self) -> bool:
        return self.min_replicas is not None or self.max_replicas is not None

    @property
    def bounds(self) -> tuple[int, int]:
        """(min, max) replicas: a bound not given defaults to 1 (min) or max(replicas, min)."""
        low = 1 if self.min_replicas is None else self.min_replicas
        high = max(self.replicas, low) if self.max_replicas is None else self.max_replicas
        return low, high
