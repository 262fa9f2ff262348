"""API keys: `Authorization: Bearer KEY` on every route but the probes, as ASGI middleware
around the whole app (so every route, and every route added later, is covered by one check).

    /health, /v2/health/live, /v2/health/ready,         open: load balancers and Kubernetes
    /v2/models/NAME[/versions/1]/ready                  probe them without a secret
    anything else                                       401 + WWW-Authenticate: Bearer
                                                        unless a key matches

The token is compared with every configured key by `hmac.compare_digest`, all of them each
time, so neither which key matched nor how much of one did shows in the time taken. The 401
body is the protocol's own error (protocol_error: OpenAI's error object on /v1/*, Cohere's on
/v2/rerank, TEI's `{"error", "error_type"}` on TEI's routes, `{"error"}` on the v2 protocol,
`{"error", "type"}` elsewhere), so each client library raises its own authentication error.
TEI itself answers an empty 401 (router/src/http/server.rs); its body here is TEI's
ErrorResponse with error_type "Validation". Under `--ray` the headers travel with the request
(relay.py), so each replica's app applies the same check.
"""
from __future__ import annotations

import hmac

from . import cohere, openai, tei, tei_routes, v2
from .endpoints import OPEN
from .wire import PREDICT

_COHERE = frozenset(e.path for e in cohere.ENDPOINTS)
_TEI = frozenset(e.path for e in tei_routes.ENDPOINTS)
_KIND = "InvalidApiKey"     # OpenAI's code for it: invalid_api_key


def protocol_error(path: str):
    """The error writer (status, message, kind, headers) of the protocol that serves `path`."""
    if path in _COHERE:
        return cohere.error
    if path in _TEI:
        return tei.error
    if path.startswith("/v1/"):
        return openai.error_response
    if path.startswith("/v2"):
        return v2.INFER.error
    return PREDICT.error




def open_paths(name: str) -> frozenset[str]:
    """OPEN's paths for the model served as `name`."""
    return frozenset(p.format(name=name, version=v2.VERSION) for p in OPEN)


class RequireApiKey:
    """ASGI middleware: an HTTP request to a route not in `open` needs one of `keys`."""

    def __init__(self, app, keys: tuple[str, ...], open: frozenset[str]):
        if not keys:
            raise ValueError("RequireApiKey needs at least one key")
        self.app = app
        self.keys = tuple(k.encode("ascii") for k in keys)
        self.open = open

    async def __call__(self, scope, receive, send):
        if scope["type"] == "http" and scope["path"] not in self.open:
            refusal = self.refusal(scope)
            if refusal is not None:
                await refusal(scope, receive, send)
                return
        await self.app(scope, receive, send)

    def granted(self, token: bytes) -> bool:
        ok = False
        for key in self.keys:   # every key, every time: no early exit to time
            ok |= hmac.compare_digest(token, key)
        return ok

    def refusal(self, scope):
        """None when the request carries a valid key, else the 401 response."""
        header = next((v for k, v in scope.get("headers", ()) if k == b"authorization"), None)
        if header is not None:
            scheme, _, token = header.strip().partition(b" ")
            if scheme.lower() == b"bearer" and self.granted(token.strip()):
                return None
            message = ("the API key is not valid for this server: send `Authorization: Bearer "
                       "KEY` with one of the keys given to `bertonnx serve --api-key`")
            challenge = 'Bearer realm="bertonnx", error="invalid_token"'
        else:
            message = ("this server needs an API key: send the header `Authorization: Bearer "
                       "KEY` with one of the keys given to `bertonnx serve --api-key`")
            challenge = 'Bearer realm="bertonnx"'
        return protocol_error(scope["path"])(401, message, _KIND,
                                             {"WWW-Authenticate": challenge})
