"""`bertonnx serve`'s options, typed records the CLI and `create_app` share.

Every limit has a default, a flag, and a refusal that names both (413 for requests too large,
400 for answers too many, 408 for bodies too slow, 503 for connections past the cap).
"""
from __future__ import annotations

import re
from dataclasses import dataclass

from ..errors import InputError
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
    # question-answering top_k × questions (400)
    max_answers: int = 1_000

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
class ServeOptions:
    host: str = "127.0.0.1"                  # loopback unless the user opens it up
    port: int = 8080                         # 0 = any free port (printed at start)
    batch: BatchConfig = BatchConfig()
    limits: Limits = Limits()
    timeouts: Timeouts = Timeouts()
    # open connections at once; past it a new one is answered 503 and closed at connect.
    # The process's file-descriptor limit is raised to fit it (or the server refuses to start)
    max_connections: int = 1_000
    threads: int | None = None               # onnxruntime intra-op threads per call
    providers: str | None = None             # onnxruntime providers, e.g. "cuda,cpu"
    # the model's name on /v1/models and /v2/models/{name} (None: the export folder's name)
    name: str | None = None

    def __post_init__(self):
        if not isinstance(self.max_connections, int) or self.max_connections < 1:
            raise InputError(f"--max-connections must be ≥ 1, got {self.max_connections!r}",
                             "pass e.g. --max-connections 1000")
        if self.name is not None and not _NAME.fullmatch(self.name):
            raise InputError(f"--name {self.name!r} is not a model name: it goes into URL paths "
                             "(/v2/models/NAME)", "use letters, digits and . _ - : (at most "
                             "200), e.g. --name minilm")


# A model name: one URL path segment that needs no quoting.
_NAME = re.compile(r"[A-Za-z0-9][A-Za-z0-9._:-]{0,199}")
