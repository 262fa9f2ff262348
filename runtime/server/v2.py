"""The Open Inference Protocol v2 over REST (KServe v2, Triton's HTTP API): what
`tritonclient.http` and KServe clients speak, with raw text in and the task's answers out.

    GET  /v2                                  {"name", "version", "extensions"}
    GET  /v2/health/live                      200 while the process runs
    GET  /v2/health/ready                     200 once the model answers, 503 before / draining
    GET  /v2/models/{name}[/versions/1]       metadata: inputs and outputs (name, datatype, shape)
    GET  /v2/models/{name}[/versions/1]/ready 200 / 503 (404 for another name)
    POST /v2/models/{name}[/versions/1]/infer {"id"?, "parameters"?, "inputs": [...],
                                              "outputs"?: [...]} -> {"model_name",
                                              "model_version", "id"?, "outputs": [...]}

The tensors of each task are its pipeline's (`Pipeline.tensors`, runtime/core/tensors.py).
`parameters` of a request are the pipeline's keyword arguments that table allows (plus Triton's
`binary_data_output`; `priority` and `timeout` are accepted and ignored: one queue, and
--body-timeout-s). Requested `outputs` are answered in their order, others left out; `id` is
echoed. Errors are `{"error": "..."}`: 400 for a bad request, 404 for another model's name, and
the server's other statuses (413, 503).

The binary tensor data extension is supported both ways, since tritonclient uses it by
default: a body whose `Inference-Header-Content-Length` header says the JSON ends early
carries each input with `parameters.binary_data_size` as raw bytes after it (BYTES: a 4-byte
little-endian length before each element); outputs asked for with `binary_data` (or all, with
`binary_data_output`) come back the same way, FP32 / INT64 little-endian. Reference: the
KServe "Open Inference Protocol" REST spec and Triton's docs/protocol/extension_binary_data.md.
"""
from __future__ import annotations

import json
import math
import struct
from dataclasses import dataclass
from importlib import metadata

import numpy as np
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from ..core.parameters import check
from ..core.tensors import BYTES, HIDDEN, TaskTensors, Tensor, hidden_size
from .protocol import ClientError, Parsed
from .wire import ANY_METHOD, Call, Wire, served

VERSION = "1"                     # the one version of the one model served
EXTENSIONS = ("binary_tensor_data",)
PLATFORM = "bertonnx_onnxruntime"
HEADER_LENGTH = "inference-header-content-length"
# request parameters of the protocol itself, not the pipeline's: binary_data_output is read,
# the others accepted and ignored (one queue; deadlines are the server's)
RESERVED = frozenset({"binary_data_output", "priority", "timeout"})
REQUEST_FIELDS = frozenset({"id", "parameters", "inputs", "outputs"})


def _bad(message: str, status: int = 400) -> ClientError:
    return ClientError(status, message)


@dataclass(frozen=True)
class Answer:
    """What the response needs besides the results: the request's id, the outputs to send
    (name, as binary data?) in order, the task's tensors and the model's name."""

    id: str | None
    outputs: tuple[tuple[str, bool], ...]
    tensors: TaskTensors
    model: str


class InferWire(Wire):
    name = "v2"

    def model_of(self, request, body: bytes):
        return request.path_params["name"]   # the protocol names the model in its path

    def unknown_model(self, name, names):
        return _bad(f"unknown model {name!r}: this server serves {served(names)}", 404)

    def parse(self, state, request, body: bytes) -> Call:
        check_model(request, state.name)
        encoding = request.headers.get("content-encoding", "identity").lower()
        if encoding != "identity":
            raise _bad(f"Content-Encoding {encoding} is not supported; send the body "
                       "uncompressed (tritonclient: leave request_compression_algorithm out)")
        header, binary = _split(body, request.headers.get(HEADER_LENGTH))
        try:
            data = json.loads(header)
        except (UnicodeDecodeError, json.JSONDecodeError, RecursionError) as e:
            raise _bad(f"the request is not valid JSON ({str(e)[:120]})") from None
        if not isinstance(data, dict) or not isinstance(data.get("inputs"), list):
            raise _bad('the request must be a JSON object with "inputs": a list of tensors')
        extra = sorted(set(data) - REQUEST_FIELDS)
        if extra:
            raise _bad(f"unknown request fields {extra}; the protocol's are "
                       f"{sorted(REQUEST_FIELDS)}")
        request_id = data.get("id")
        if request_id is not None and not isinstance(request_id, str):
            raise _bad('"id" must be a string')
        spec = state.pipeline.tensors
        params = data.get("parameters") or {}
        if not isinstance(params, dict):
            raise _bad('"parameters" must be a JSON object')
        binary_default = params.get("binary_data_output", False)
        params = {k: v for k, v in params.items() if k not in RESERVED}
        unknown = sorted(set(params) - set(spec.parameters))
        if unknown:
            raise _bad(f"unknown parameters {unknown} for {spec.task} over /v2; allowed: "
                       f"{', '.join(sorted(spec.parameters)) or 'none'}")
        check({k: r for k, r in spec.parameters.items() if r is not None}, params,
              state.pipeline)
        texts = _inputs(spec, data["inputs"], binary)
        outputs = _outputs(spec, data.get("outputs"), binary_default is True)
        return Call(Parsed(spec.read(texts, state.pipeline), False, params),
                    Answer(request_id, outputs, spec, state.name))

    def respond(self, answer, call: Call, work):
        ctx: Answer = call.context
        arrays = ctx.tensors.write(answer)
        outputs, chunks = [], []
        for name, as_binary in ctx.outputs:
            spec = next(t for t in ctx.tensors.outputs if t.name == name)
            array = arrays[name]
            out = {"name": name, "datatype": spec.datatype, "shape": list(array.shape)}
            if as_binary:
                raw = _to_binary(array, spec.datatype)
                out["parameters"] = {"binary_data_size": len(raw)}
                chunks.append(raw)
            else:
                out["data"] = array.reshape(-1).tolist()
            outputs.append(out)
        body = {"model_name": ctx.model, "model_version": VERSION,
                **({"id": ctx.id} if ctx.id is not None else {}), "outputs": outputs}
        head = json.dumps(body, ensure_ascii=False).encode()
        if not chunks:
            return Response(head, 200, media_type="application/json")
        return Response(head + b"".join(chunks), 200, media_type="application/octet-stream",
                        headers={"Inference-Header-Content-Length": str(len(head))})

    def error(self, status, message, kind, headers=None, parameter=None):
        return JSONResponse({"error": message}, status, headers=headers)


INFER = InferWire()


def check_model(request, served: str) -> None:
    """ClientError(404) unless the path names the served model (and its one version)."""
    name = request.path_params["name"]
    version = request.path_params.get("version", VERSION)
    if name != served:
        raise _bad(f"unknown model {name!r}: this server serves {served!r}", 404)
    if version != VERSION:
        raise _bad(f"unknown version {version!r} of model {name!r}: it has version "
                   f"{VERSION} only", 404)


# -- reading a request -----------------------------------------------------------------------


def _split(body: bytes, header_length: str | None) -> tuple[bytes, bytes]:
    """The JSON header and the binary data after it (binary tensor data extension)."""
    if header_length is None:
        return body, b""
    try:
        n = int(header_length)
    except ValueError:
        raise _bad("Inference-Header-Content-Length is not a number") from None
    if not 0 < n <= len(body):
        raise _bad(f"Inference-Header-Content-Length {n} does not fit the body of "
                   f"{len(body)} bytes")
    return body[:n], body[n:]


def _inputs(spec: TaskTensors, tensors: list, binary: bytes) -> dict[str, list[str]]:
    """Each input tensor's texts, checked against the task's declaration: known names, BYTES,
    data matching the shape, every required input there, all of one length."""
    texts: dict[str, list[str]] = {}
    offset = 0
    for t in tensors:
        if not isinstance(t, dict) or not isinstance(t.get("name"), str):
            raise _bad('each input must be an object with "name", "shape", "datatype", "data"')
        name = t["name"]
        declared = spec.input(name)
        if declared is None:
            raise _bad(f"unknown input {name!r} for {spec.task}; its inputs: "
                       f"{', '.join(x.name for x in spec.inputs)}")
        if name in texts:
            raise _bad(f"input {name!r} is given twice")
        if t.get("datatype") != BYTES:
            raise _bad(f"input {name!r} must be BYTES (UTF-8 text), got "
                       f"{t.get('datatype')!r:.40}")
        shape = t.get("shape")
        if (not isinstance(shape, list) or not shape
                or not all(isinstance(d, int) and not isinstance(d, bool) and d >= 0
                           for d in shape)):
            raise _bad(f"input {name!r} needs a shape: a list of sizes, e.g. [N]")
        count = math.prod(shape)
        size = _parameters(t, f"input {name!r}").get("binary_data_size")
        if size is not None:
            if not isinstance(size, int) or size < 0 or offset + size > len(binary):
                raise _bad(f"input {name!r} says binary_data_size {size!r} but "
                           f"{len(binary) - offset} bytes of binary data are left")
            values = _from_binary(name, binary[offset:offset + size])
            offset += size
        elif "data" in t:
            values = _flatten(name, t["data"])
        else:
            raise _bad(f"input {name!r} has no data (neither \"data\" nor "
                       "parameters.binary_data_size)")
        if len(values) != count:
            raise _bad(f"input {name!r} has {len(values)} elements for shape {shape}")
        if count == 0:
            raise _bad(f"input {name!r} holds no text; send at least one")
        texts[name] = values
    if offset != len(binary):
        raise _bad(f"{len(binary) - offset} bytes of binary data after the inputs belong to "
                   "none of them")
    missing = [x.name for x in spec.inputs if not x.optional and x.name not in texts]
    if missing:
        raise _bad(f"{spec.task} needs the input(s) {', '.join(missing)} (BYTES, one element "
                   "per text)")
    lengths = {name: len(v) for name, v in texts.items()}
    if len(set(lengths.values())) > 1:
        raise _bad(f"the inputs hold different numbers of elements {lengths}; give one "
                   "element of each per row")
    return texts


def _parameters(tensor: dict, what: str) -> dict:
    """A tensor's `parameters`: a JSON object, or none."""
    params = tensor.get("parameters") or {}
    if not isinstance(params, dict):
        raise _bad(f'{what}: "parameters" must be a JSON object')
    return params


def _flatten(name: str, data) -> list[str]:
    """JSON tensor data, flat or nested row-major, as a flat list of strings."""
    out, stack = [], [data]
    while stack:
        item = stack.pop()
        if isinstance(item, list):
            stack.extend(reversed(item))
        elif isinstance(item, str):
            out.append(item)
        else:
            raise _bad(f"input {name!r} holds a {type(item).__name__}; BYTES data in JSON are "
                       "strings")
    return out


def _from_binary(name: str, raw: bytes) -> list[str]:
    """BYTES binary data: each element a 4-byte little-endian length, then its bytes."""
    out, i = [], 0
    while i < len(raw):
        if i + 4 > len(raw):
            raise _bad(f"input {name!r}: binary BYTES data ends inside an element's length")
        (n,) = struct.unpack_from("<I", raw, i)
        if i + 4 + n > len(raw):
            raise _bad(f"input {name!r}: a binary BYTES element of {n} bytes runs past the "
                       "tensor's data")
        try:
            out.append(raw[i + 4:i + 4 + n].decode("utf-8"))
        except UnicodeDecodeError:
            raise _bad(f"input {name!r}: element {len(out)} is not UTF-8 text") from None
        i += 4 + n
    return out


def _outputs(spec: TaskTensors, requested, binary_default: bool) -> tuple[tuple[str, bool], ...]:
    """(name, as binary?) of each output to send: those requested, in their order, else all."""
    if requested is None:
        return tuple((name, binary_default) for name in spec.output_names)
    if not isinstance(requested, list) or not requested:
        raise _bad('"outputs" must be a non-empty list of {"name": ...} objects')
    out = []
    for r in requested:
        if not isinstance(r, dict) or not isinstance(r.get("name"), str):
            raise _bad('each requested output must be an object with a "name"')
        name = r["name"]
        params = _parameters(r, f"output {name!r}")
        if name not in spec.output_names:
            raise _bad(f"unknown output {name!r} for {spec.task}; its outputs: "
                       f"{', '.join(spec.output_names)}")
        if any(name == seen for seen, _ in out):
            raise _bad(f"output {name!r} is requested twice")
        if params.get("classification"):
            raise _bad("the classification extension is not supported; the text-"
                       "classification task answers label and score tensors")
        as_binary = params.get("binary_data", binary_default)
        if not isinstance(as_binary, bool):
            raise _bad(f"output {name!r}: binary_data must be true or false")
        out.append((name, as_binary))
    return tuple(out)


# -- writing an answer -----------------------------------------------------------------------


def _to_binary(array: np.ndarray, datatype: str) -> bytes:
    if datatype == BYTES:
        parts = []
        for value in array.reshape(-1):
            raw = value.encode("utf-8")
            parts += [struct.pack("<I", len(raw)), raw]
        return b"".join(parts)
    return array.astype(array.dtype.newbyteorder("<"), copy=False).tobytes()


def model_metadata(state) -> dict:
    spec = state.pipeline.tensors

    def shape(t: Tensor) -> list[int]:
        return [hidden_size(state.pipeline) if d == HIDDEN else d for d in t.shape]

    return {"name": state.name, "versions": [VERSION], "platform": PLATFORM,
            "inputs": [{"name": t.name, "datatype": t.datatype, "shape": shape(t)}
                       for t in spec.inputs],
            "outputs": [{"name": t.name, "datatype": t.datatype, "shape": shape(t)}
                        for t in spec.outputs]}


def routes(h) -> list:
    """The /v2 routes on the app's handlers `h` (app._Handlers)."""
    state = h.state

    def refusal(status: int, message: str, headers=None):
        return JSONResponse({"error": message}, status, headers=headers)

    def unready():
        if state.draining:
            return refusal(503, "the server is shutting down")
        if not state.ready:
            return refusal(503, "the model is still loading; retry shortly"
                           if state.load_error is None else "the model failed to load",
                           {"Retry-After": "1"})
        return None

    async def server(request):
        try:
            version = metadata.version("bertonnx")
        except metadata.PackageNotFoundError:
            version = "unknown"
        return JSONResponse({"name": "bertonnx", "version": version,
                             "extensions": list(EXTENSIONS)})

    async def live(request):
        return JSONResponse({"live": True})

    async def ready(request):
        return unready() or JSONResponse({"ready": True})

    def model_route(answer):
        async def endpoint(request):
            name = request.path_params["name"]
            model = state.models.get(name)
            try:
                if model is None:
                    raise INFER.unknown_model(name, state.models.names)
                check_model(request, model.name)
            except ClientError as e:
                return refusal(e.status, e.message)
            return unready() or answer(model)
        return endpoint

    async def infer(request):
        return await h.infer(request, INFER)

    async def unknown(request):
        return refusal(404, f"no route {request.method} {request.url.path}")

    metadata_ = model_route(lambda model: JSONResponse(model_metadata(model)))
    model_ready = model_route(lambda model: JSONResponse({"name": model.name, "ready": True}))
    out = [Route("/v2", server, methods=["GET"]),
           Route("/v2/health/live", live, methods=["GET"]),
           Route("/v2/health/ready", ready, methods=["GET"])]
    for base in ("/v2/models/{name}", "/v2/models/{name}/versions/{version}"):
        out += [Route(base, metadata_, methods=["GET"]),
                Route(base + "/ready", model_ready, methods=["GET"]),
                Route(base + "/infer", infer, methods=["POST"])]
    return out + [Route("/v2/{rest:path}", unknown, methods=ANY_METHOD)]
