"""The module stack a sentence-transformers model runs after its encoder, as typed records
that compute in numpy: Pooling, Dense, Normalize (`SentenceStack`), recorded in an export's
manifest (`to_json`/`from_json`, which refuses in one line a stack this runtime cannot
compute), with each Dense module's weights read from a safetensors file.

runtime/core/sentence_transformers.py reads a folder into this record. Reference:
sentence-transformers 5.7 (sentence_transformer/modules/pooling.py, base/modules/dense.py,
sentence_transformer/modules/normalize.py); torch.nn's activations.
"""
from __future__ import annotations

import json
import math
from dataclasses import dataclass, field, fields, replace
from pathlib import Path
from typing import Callable, ClassVar, Mapping

import numpy as np

from .errors import ArtifactError
from .postprocess import SIMILARITIES, l2_normalize, pool
from .tasks import POOLING_MODES

STACK_VERSION = 1       # the manifest's "sentence_transformers" record; newer ones are refused
# Every SentenceTransformer has these prompt names, empty unless its folder says otherwise
# (sentence_transformer/model.py `_default_prompts`)
DEFAULT_PROMPTS = {"query": "", "document": ""}
TOKENS, SENTENCE = "token_embeddings", "sentence_embedding"   # the features a module reads


_erfc = np.frompyfunc(math.erfc, 1, 1)   # numpy has no erf; math's is exact to float64


def _gelu(x):
    # 0.5·x·(1 + erf(x/√2)) as erfc, which keeps the far negative tail (as torch computes it)
    return 0.5 * x * _erfc(-x / math.sqrt(2.0)).astype(np.float64)


# torch.nn activations a Dense module may name (with their default arguments)
ACTIVATIONS: Mapping[str, Callable[[np.ndarray], np.ndarray]] = {
    "Identity": lambda x: x,
    "Tanh": np.tanh,
    "Sigmoid": lambda x: 1.0 / (1.0 + np.exp(-x)),
    "ReLU": lambda x: np.maximum(x, 0.0),
    "GELU": _gelu,
    "SiLU": lambda x: x / (1.0 + np.exp(-x)),
    "LeakyReLU": lambda x: np.where(x >= 0, x, 0.01 * x),
    "ELU": lambda x: np.where(x > 0, x, np.expm1(np.minimum(x, 0.0))),
    "Softplus": lambda x: np.where(x > 20.0, x, np.log1p(np.exp(np.minimum(x, 20.0)))),
    "Softsign": lambda x: x / (1.0 + np.abs(x)),
}


def _refuse(where, what: str) -> ArtifactError:
    return ArtifactError(f"{where} records {what}, which this bertonnx cannot compute",
                         "upgrade bertonnx, or export the model again with this one")


@dataclass(frozen=True)
class Pooling:
    """Token vectors to one vector per text: each mode's vector, concatenated in order."""

    kind: ClassVar[str] = "Pooling"
    modes: tuple[str, ...] = ("mean",)
    include_prompt: bool = True   # False: the prompt's tokens are left out of the pooling
    embedding_dimension: int | None = None

    def width(self, widths: dict, modes: tuple[str, ...]) -> None:
        widths[SENTENCE] = len(modes) * widths[TOKENS]

    def apply(self, features: dict, modes: tuple[str, ...], prompt_length: int) -> None:
        mask = features["attention_mask"]
        if not self.include_prompt and prompt_length:
            # pooling.py `_exclude_prompt_from_mask`, right padding: the first tokens go
            mask = mask.copy()
            mask[:, :prompt_length] = 0
        features[SENTENCE] = pool(features[TOKENS], mask, modes)

    def to_json(self) -> dict:
        return {"type": self.kind, "pooling_mode": list(self.modes),
                "include_prompt": self.include_prompt,
                "embedding_dimension": self.embedding_dimension}


@dataclass(frozen=True)
class Dense:
    """activation(x @ W.T + b) on one feature (the sentence vector, or each token's); with
    `residual` (PyLate's use_residual) plus x, or x @ R.T where the widths differ."""

    kind: ClassVar[str] = "Dense"
    in_features: int
    out_features: int
    bias: bool
    activation_function: str          # a name in ACTIVATIONS
    weights: str                      # the safetensors (or .bin) file, relative to the folder
    module_input_name: str = SENTENCE
    module_output_name: str = SENTENCE
    residual: bool = False
    weight: np.ndarray | None = field(default=None, compare=False, repr=False)   # (out, in)
    linear_bias: np.ndarray | None = field(default=None, compare=False, repr=False)
    residual_weight: np.ndarray | None = field(default=None, compare=False, repr=False)

    def width(self, widths: dict, modes) -> None:
        got = widths.get(self.module_input_name)
        if got != self.in_features:
            raise ValueError(f"its Dense module takes {self.in_features}-wide vectors and "
                             f"would get {got}-wide ones")
        widths[self.module_output_name] = self.out_features

    def apply(self, features: dict, modes, prompt_length: int) -> None:
        features[self.module_output_name] = self.project(features[self.module_input_name])

    def project(self, x: np.ndarray) -> np.ndarray:
        """(..., in) -> (..., out). The layer in float32, as torch runs it (one 2-D product: a
        3-D one costs numpy 5x more); the activation in float64 (exact erf) unless it is the
        identity; then the residual."""
        flat = x.reshape(-1, x.shape[-1])
        y = flat @ self.weight.T
        if self.linear_bias is not None:
            y += self.linear_bias
        if self.activation_function != "Identity":
            y = ACTIVATIONS[self.activation_function](y.astype(np.float64)).astype(np.float32)
        if self.residual:
            y += flat if self.residual_weight is None else flat @ self.residual_weight.T
        return y.reshape(*x.shape[:-1], self.out_features)

    def to_json(self) -> dict:
        # the settings, not the arrays (compare=False): those live in the weights file
        return {"type": self.kind, **{f.name: getattr(self, f.name) for f in fields(self)
                                      if f.compare}}


@dataclass(frozen=True)
class Normalize:
    """The sentence vector scaled to unit length (torch's F.normalize: eps 1e-12)."""

    kind: ClassVar[str] = "Normalize"

    def width(self, widths: dict, modes) -> None:
        pass

    def apply(self, features: dict, modes, prompt_length: int) -> None:
        if SENTENCE in features:
            features[SENTENCE] = l2_normalize(features[SENTENCE])

    def to_json(self) -> dict:
        return {"type": self.kind}


Module = Pooling | Dense | Normalize
KINDS = {m.kind: m for m in (Pooling, Dense, Normalize)}


@dataclass(frozen=True)
class SentenceStack:
    """What follows the encoder in a sentence-transformers model, and how it reads text."""

    modules: tuple[Module, ...] = (Pooling(),)   # after the Transformer, in order
    max_seq_length: int | None = None    # None: the tokenizer's model_max_length decides
    do_lower_case: bool = False
    prompts: Mapping[str, str] = field(default_factory=lambda: dict(DEFAULT_PROMPTS))
    default_prompt_name: str | None = None
    similarity_fn_name: str = "cosine"
    format: str = "none"                 # "v2-v4", "v5" or "none" (a plain encoder)

    @property
    def pooling(self) -> Pooling:
        return next(m for m in self.modules if isinstance(m, Pooling))

    @property
    def normalized(self) -> bool:
        """Whether the stack ends by normalizing (the `normalize` parameter's default)."""
        return bool(self.modules) and isinstance(self.modules[-1], Normalize)

    def defaults(self) -> dict:
        """The pipeline parameters this stack chooses (recorded as the export's defaults)."""
        return {"pooling": "+".join(self.pooling.modes), "normalize": self.normalized}

    def run(self, normalize: bool) -> tuple[Module, ...]:
        """The modules a call runs: a trailing Normalize dropped or added by `normalize`."""
        mods = self.modules[:-1] if self.normalized else self.modules
        return (*mods, Normalize()) if normalize else mods

    def width(self, hidden: int, modes: tuple[str, ...], normalize: bool = False) -> int:
        """The sentence vector's width for token vectors `hidden` wide (ValueError naming a
        module that does not fit)."""
        widths = {TOKENS: hidden}
        for m in self.run(normalize):
            m.width(widths, modes)
        return widths[SENTENCE]

    def embed(self, hidden: np.ndarray, attention_mask: np.ndarray, modes: tuple[str, ...],
              normalize: bool, prompt_length: int = 0) -> np.ndarray:
        """(B, T, H) token vectors -> (B, D) sentence vectors, module by module; `modes`
        stand in for the Pooling module's own."""
        features = {TOKENS: hidden, "attention_mask": attention_mask}
        for m in self.run(normalize):
            m.apply(features, modes, prompt_length)
        return features[SENTENCE]

    # -- the manifest's record -----------------------------------------------------------

    def to_json(self) -> dict:
        return {"version": STACK_VERSION, "format": self.format,
                "modules": [m.to_json() for m in self.modules],
                "max_seq_length": self.max_seq_length, "do_lower_case": self.do_lower_case,
                "prompts": dict(self.prompts), "default_prompt_name": self.default_prompt_name,
                "similarity_fn_name": self.similarity_fn_name}

    @classmethod
    def from_json(cls, data: dict, where) -> "SentenceStack":
        """The stack a manifest records; ArtifactError (one line) for one it cannot compute.
        (A sentence vector's stack is checked by `check_order`; a SparseEncoder's or a
        CrossEncoder's has no modules.)"""
        try:
            if data.get("version", 0) > STACK_VERSION:
                raise _refuse(where, f"a sentence-transformers stack of version "
                                     f"{data['version']}")
            mods = []
            for m in data["modules"]:
                kind = KINDS.get(m.get("type"))
                if kind is None:
                    raise _refuse(where, f"sentence-transformers module {m.get('type')!r}")
                args = {k: v for k, v in m.items() if k != "type"}
                if kind is Pooling:
                    args["modes"] = tuple(args.pop("pooling_mode"))
                    check_modes(args["modes"], where)
                if kind is Dense and args["activation_function"] not in ACTIVATIONS:
                    raise _refuse(where, f"Dense activation {args['activation_function']!r}")
                mods.append(kind(**args))
            if data["similarity_fn_name"] not in SIMILARITIES:
                raise _refuse(where, f"similarity function {data['similarity_fn_name']!r}")
            stack = cls(tuple(mods), data["max_seq_length"], bool(data["do_lower_case"]),
                        dict(data["prompts"]), data["default_prompt_name"],
                        data["similarity_fn_name"], data.get("format", "none"))
        except (KeyError, TypeError, AttributeError) as e:
            raise ArtifactError(f"{where} has a damaged sentence-transformers record ({e!r})",
                                "export the model again") from None
        return stack

    def with_weights(self, folder: Path, listed: Mapping | None = None) -> "SentenceStack":
        """The stack with each Dense module's weights read from `folder`; `listed` (an
        export's manifest files) must vouch for each file."""
        mods = []
        for m in self.modules:
            if isinstance(m, Dense):
                if listed is not None and m.weights not in listed:
                    raise ArtifactError(f"{folder}'s manifest does not list {m.weights}, which "
                                        "the runtime reads", "export the model again")
                m = load_dense(m, folder)
            mods.append(m)
        return replace(self, modules=tuple(mods))


def check_modes(modes, where) -> None:
    unknown = [m for m in modes if m not in POOLING_MODES]
    if unknown or not modes:
        raise _refuse(where, f"pooling mode {unknown[0] if unknown else 'none'!r}")


def check_order(stack: SentenceStack, where) -> None:
    poolings = [m for m in stack.modules if isinstance(m, Pooling)]
    if len(poolings) != 1:
        raise ArtifactError(f"{where} has {len(poolings)} Pooling modules; a sentence vector "
                            "needs exactly one", "use a folder sentence-transformers encodes "
                            "sentences with")


# -- Dense weights -------------------------------------------------------------------------

_SAFETENSORS_DTYPES = {"F32": "<f4", "F16": "<f2", "F64": "<f8"}


def safetensors_shapes(path: Path) -> dict[str, list[int]]:
    """Each tensor's shape from a safetensors file's header, without reading the tensors (a
    whole encoder's weights, to learn one layer's width)."""
    try:
        with open(path, "rb") as f:
            n = int.from_bytes(f.read(8), "little")
            header = json.loads(f.read(n))
        return {k: list(t["shape"]) for k, t in header.items() if k != "__metadata__"}
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise ArtifactError(f"{path} is not a safetensors file ({e!r})",
                            "restore the file") from None


def read_safetensors(path: Path) -> dict[str, np.ndarray]:
    """Every tensor of a safetensors file as float32 (the format: an 8-byte little-endian
    header size, a JSON header of dtype/shape/data_offsets, then the bytes)."""
    try:
        data = Path(path).read_bytes()
        n = int.from_bytes(data[:8], "little")
        header = json.loads(data[8:8 + n])
        body = memoryview(data)[8 + n:]
        out = {}
        for name, t in header.items():
            if name == "__metadata__":
                continue
            lo, hi = t["data_offsets"]
            if t["dtype"] == "BF16":   # the top half of a float32
                arr = (np.frombuffer(body[lo:hi], "<u2").astype(np.uint32) << 16).view("<f4")
            else:
                arr = np.frombuffer(body[lo:hi], _SAFETENSORS_DTYPES[t["dtype"]])
            out[name] = arr.astype(np.float32).reshape(t["shape"])
        return out
    except (ValueError, KeyError, TypeError, OSError) as e:
        raise ArtifactError(f"{path} is not a safetensors file of float tensors ({e!r})",
                            "restore the file, or export the model again") from None


def load_dense(m: Dense, folder: Path) -> Dense:
    path = folder / m.weights
    if path.suffix == ".bin":
        raise ArtifactError(f"{path} is a pickle, which the torch-free runtime does not read",
                            f"`bertonnx adopt {folder} --out DIR` (or `bertonnx export` of the "
                            "model folder) converts the weights")
    tensors = read_safetensors(path)
    weight, bias = tensors.get("linear.weight"), tensors.get("linear.bias")
    if weight is None or weight.shape != (m.out_features, m.in_features) or (
            m.bias and (bias is None or bias.shape != (m.out_features,))):
        raise ArtifactError(f"{path} does not hold a {m.in_features}->{m.out_features} "
                            "linear layer", "restore the file, or export the model again")
    residual = None
    if m.residual and m.in_features != m.out_features:   # else the input itself is added
        residual = tensors.get("residual.weight")
        if residual is None or residual.shape != (m.out_features, m.in_features):
            raise ArtifactError(f"{path} does not hold the {m.in_features}->{m.out_features} "
                                "residual layer its config.json asks for",
                                "restore the file, or export the model again")
        residual = np.ascontiguousarray(residual, np.float32)
    return replace(m, weight=np.ascontiguousarray(weight, np.float32),
                   linear_bias=bias.astype(np.float32) if m.bias else None,
                   residual_weight=residual)
