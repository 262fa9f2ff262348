"""How one inference route speaks: a `Wire` reads a request body into the pipeline's inputs and
parameters (`parse`), writes the answer (`respond`) and writes a refusal (`error`).

Every inference route runs the same path in app.py (`_Handlers.infer`): the body read within
--max-body-bytes and --body-timeout-s, the request judged whole and priced against the limits
(protocol.Prepared), the dynamic batcher, the metrics, the drain. Only these three steps
differ between the protocols:

    POST /predict                   Hugging Face's convention   PREDICT (here; TEI's on a
                                                                classifier: tei_routes)
    POST /v1/embeddings             OpenAI's embeddings API     openai.EMBEDDINGS
    POST /v2/models/{name}/infer    Open Inference Protocol v2  v2.INFER
    POST /embed, /rerank, /, ...    text-embeddings-inference   tei_routes.WIRES, its
                                                                dispatch by task
    POST /v2/rerank, /v2/embed      Cohere's rerank and embed   cohere.WIRE, EMBED_WIRE

so a request merged into a batch with requests of another protocol gets the same answer.
"""
from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from starlette.responses import Response

from ..core.tensors import jsonable
from .protocol import ClientError, Parsed, error_body, json_bytes, parse_request


# a catch-all route's methods: an unknown path is a 404 whatever the method
ANY_METHOD = ["GET", "HEAD", "POST", "PUT", "PATCH", "DELETE", "OPTIONS"]


class FieldError(ClientError):
    """A refusal that names the request field at fault (OpenAI's errors carry it as `param`)."""

    def __init__(self, status: int, message: str, parameter: str | None,
                 kind: str = "InputError", headers: dict | None = None):
        super().__init__(status, message, kind, headers)
        self.parameter = parameter


@dataclass(frozen=True)
class Call:
    """A request as its wire read it: the pipeline's inputs and parameters (`parsed`, judged
    next by protocol.Prepared) and what `respond` needs besides the results (`context`).
    `parsed` None: the wire answers without the model (`respond(None, call, None)`: TEI's
    /tokenize)."""

    parsed: Parsed | None
    context: Any = None


class Wire:
    """Hugging Face's inference convention (the /predict route): `{"inputs", "parameters"}` in,
    exactly the pipeline's JSON out, `{"error", "type"}` for refusals. Other wires override
    the three methods."""

    name = "predict"
    endpoint = None   # the route's endpoints.Endpoint, where the wire serves one route

    @property
    def tasks(self) -> tuple[str, ...] | None:
        """The tasks whose exports answer this wire's route (None: every task): a request
        that names no model goes to the one model of these (registry.Registry.pick)."""
        return self.endpoint.tasks if self.endpoint is not None else None

    def model_of(self, request, body: bytes):
        """The model the request names: its body's `model` (None: it names none). Only a
        body that holds the word is read for it, so one served model costs no second read."""
        if b'"model"' not in body:
            return None
        try:
            data = json.loads(body)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError):
            return None   # the wire's parse says what is wrong with it
        return data.get("model") if isinstance(data, dict) else None

    def unknown_model(self, name, names: list[str]) -> ClientError:
        """The refusal (404) of a model name that no model here has."""
        return FieldError(404, f"model {str(name)[:80]!r} is not served here: this server "
                               f"serves {served(names)} (GET /v1/models)", "model",
                          "ModelNotFound")

    def parse(self, state, request, body: bytes) -> Call:
        """The request read (ClientError / InputError for what is wrong). `state` is the model
        the request is for (registry.Model: the pipeline, the parameters it takes, the
        limits, the served name)."""
        return Call(parse_request(state.pipeline.task, body, state.allowed,
                                  state.options.limits.max_inputs))

    def price(self, prepared, pipe, limits, call: Call):
        """What the call would cost (protocol.Prepared.price: its tokens, against the limits),
        off the event loop for a long body; a wire may refuse more here, where the inputs are
        tokenized (TEI's `truncate: false`)."""
        return prepared.price(pipe, limits)

    def refuses_long(self, call: Call) -> bool:
        """Whether this call refuses a text past the model rather than cutting it (TEI's
        `truncate: false`): none here; the TEI wires that read `truncate` say."""
        return False

    def respond(self, answer, call: Call, work):
        """The HTTP response for the pipeline's answer (`work`: what the call cost, its
        tokens, as protocol.Prepared.price counted them)."""
        return Response(json_bytes(answer, jsonable), 200, media_type="application/json")

    def error(self, status: int, message: str, kind: str, headers: dict | None = None,
              parameter: str | None = None):
        return Response(error_body(message, kind), status, media_type="application/json",
                        headers=headers)


def served(names) -> str:
    """Model names as a message lists them: 'a', 'b'."""
    return ", ".join(map(repr, names))


PREDICT = Wire()


# --long-inputs chunk: each input's window count, in input order ("1,3,1")
WINDOWS_HEADER = "x-windows"


def with_windows(response, work):
    """The response, saying how many windows each input became where long inputs were
    windowed (pipelines/chunks.py) rather than truncated or refused."""
    if work is not None and work.windows:
        response.headers[WINDOWS_HEADER] = ",".join(map(str, work.windows))
    return response
