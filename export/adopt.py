"""`adopt`: an ONNX folder made elsewhere (runtime/foreign.py) in, a verified export out.

    folder (Optimum / transformers.js layout) -> graph inputs and outputs checked for the task
        -> fused with onnxruntime's BERT optimizer where the graph allows (not when it already
           is, or is quantized) -> [int8 | fp16] -> tokenizer + config.json
        -> parity against --reference (the checkpoint it came from) -> bertonnx.json

The result is a bertonnx export like any other: a manifest with file hashes, the fused-op
counts, and — when a reference is given — the same parity judgement `export` makes. Without
one the manifest says that nothing vouches for the numbers. Written beside `out` and renamed
into place, as `export` does.
"""
from __future__ import annotations

import shutil
from dataclasses import dataclass
from datetime import datetime, timezone
from pathlib import Path
from typing import Callable

import onnx

from bertonnx.build import load_tokenizer
from bertonnx.runtime.core.atomic import publishing
from bertonnx.runtime.core.contract import MODEL_NAME
from bertonnx.runtime.core.tasks import TASKS, pipeline_class
from bertonnx.runtime.core.errors import ArtifactError, InputError
from bertonnx.runtime.core.families import config_spellings, ort_model_type
from bertonnx.runtime.core.files import read_json_object
from bertonnx.runtime.core.foreign import check_inputs, read_foreign
from bertonnx.runtime.core.manifest import Manifest
from bertonnx.runtime.core.session import create_session
from bertonnx.runtime.core.tokenizer import TOKENIZER_FILES

from . import calibrate, fusion, graph, sentence
from .api import ExportOptions, _check_target, _versions, check_parity, locked, resolve_model
from .precisions import PRECISIONS, precision

# ops that mean the graph is already quantized: fusing or quantizing it again is refused
QUANTIZED_OPS = ("MatMulInteger", "DynamicQuantizeLinear", "QAttention", "DynamicQuantizeMatMul",
                 "QLinearMatMul", "MatMulNBits", "QEmbedLayerNormalization")
# config.json names of the sizes fusion needs, every family's spelling (DistilBERT: n_heads, dim)
_HEADS = config_spellings("num_attention_heads")
_HIDDEN = config_spellings("hidden_size")


@dataclass(frozen=True)
class AdoptOptions:
    task: str | None = None                   # default: config.json's architectures
    quantize: str = "none"                    # a row of precisions.PRECISIONS
    optimize: bool = True                     # fuse where the graph allows
    reference: str | Path | None = None       # the checkpoint the graph was made from
    force: bool = False

    def __post_init__(self):
        if self.quantize not in PRECISIONS:
            raise InputError(f"unknown quantization {self.quantize!r}",
                             f"use one of {', '.join(PRECISIONS)}")


def _size(config: dict, names: tuple[str, ...]) -> int | None:
    return next((config[n] for n in names if isinstance(config.get(n), int)), None)


def _io(proto: onnx.ModelProto) -> tuple[dict, dict]:
    def dims(vi):
        return {str(i): d.dim_param for i, d in enumerate(vi.type.tensor_type.shape.dim)
                if d.dim_param}

    def dtype(vi):
        return onnx.helper.tensor_dtype_to_np_dtype(vi.type.tensor_type.elem_type).name

    return ({i.name: {"dtype": dtype(i), "axes": dims(i)} for i in proto.graph.input},
            {o.name: {"dtype": dtype(o), "axes": dims(o)} for o in proto.graph.output})


def adopt(folder: str | Path, out: str | Path, options: AdoptOptions = AdoptOptions(), *,
          progress: Callable[[str], None] | None = None) -> Manifest:
    """Turn the folder made elsewhere at `folder` into a bertonnx export at `out`."""
    src, out = Path(folder).expanduser(), Path(out).expanduser()
    with locked(out):  # one writer per --out, as export
        return _adopt(src, out, options, progress or (lambda msg: None))


def _adopt(src: Path, out: Path, options: AdoptOptions, say) -> Manifest:
    if not src.is_dir():
        raise ArtifactError(f"{src} does not exist", "check the path")
    foreign = read_foreign(src, options.task)
    if foreign is None:
        raise ArtifactError(f"{src} is not an ONNX folder made elsewhere (it has a bertonnx.json,"
                            " or no model.onnx / onnx/model.onnx)",
                            "a bertonnx export needs no adopting; `bertonnx parity` checks one")
    task = foreign.task
    _check_target(out, options.force)
    say(f"adopting {src / foreign.model_file} ({foreign.layout} layout) for {task}")

    session = create_session(src / foreign.model_file, optimization="disable")
    check_inputs(foreign, session.inner.get_inputs())
    problems = TASKS[task].output_problems(session.output_shapes, foreign.config)
    if problems:
        raise ArtifactError(f"{src / foreign.model_file} does not fit {task}: "
                            f"{'; '.join(problems)}", "adopt it with the task it was made for")
    del session

    proto = onnx.load(str(src / foreign.model_file))
    counts = graph.op_counts(proto)
    quantized = sorted(op for op in QUANTIZED_OPS if counts.get(op))
    if quantized and options.quantize != "none":
        raise InputError(f"{foreign.model_file} is quantized already ({', '.join(quantized)})",
                         "adopt its fp32 graph (model.onnx) to quantize it here")
    optimized = fusion.attention_count(fusion.fused_counts(proto)) > 0
    notes = []
    if options.optimize and not optimized and not quantized:
        heads, hidden = _size(foreign.config, _HEADS), _size(foreign.config, _HIDDEN)
        if heads is None or hidden is None:
            notes.append("not fused: config.json gives no attention heads / hidden size")
        else:
            model_type = foreign.config.get("model_type")
            say(f"fusing (onnxruntime transformer optimizer, model_type "
                f"{ort_model_type(model_type)})")
            fused = fusion.fuse(src / foreign.model_file, heads, hidden, model_type=model_type)
            if fusion.attention_count(fusion.fused_counts(fused)) > 0:
                proto, optimized = fused, True
            else:
                notes.append("not fused: the optimizer found no attention pattern it knows")
    if options.quantize != "none" and not optimized:
        raise InputError(f"--quantize {options.quantize} works on a fused graph, and "
                         f"{foreign.model_file} could not be fused ({'; '.join(notes)})",
                         "adopt it without --quantize")
    row = precision(options.quantize)
    quant = {"mode": options.quantize} if not quantized else {"mode": "unknown",
                                                              "ops": quantized}
    if row.convert is not None:
        say(row.progress)
        # the recipes that calibrate (SmoothQuant, static int8) read real text: the folder's
        # tokenizer, which the runtime needs anyway (refused below when it cannot load it)
        box, proto = [proto], None
        proto, quant = row.convert(box, ExportOptions(quantize=options.quantize), None, None,
                                   load_tokenizer(src))

    with publishing(out) as tmp:
        graph.save_model(proto, tmp / MODEL_NAME)
        inputs, outputs = _io(proto)
        fused_ops = fusion.fused_counts(proto)
        del proto
        shutil.copy2(src / "config.json", tmp / "config.json")
        for name in TOKENIZER_FILES:
            if (src / name).is_file():
                shutil.copy2(src / name, tmp / name)
        load_tokenizer(tmp)  # a folder the runtime cannot tokenize for is refused here
        # a sentence-transformers folder's modules after the encoder, and their weights
        stack = sentence.carry(src, task, tmp)

        figures = {"note": "not checked: no --reference was given, so nothing vouches for the "
                   "graph's numbers (`bertonnx parity OUT --reference MODEL` checks them)"}
        if options.reference is not None:
            say(f"checking parity against {options.reference}")
            loaded = resolve_model(options.reference, task)
            # a graph quantized elsewhere is judged as int8 is: by task agreement
            mode = "int8" if quantized else quant["mode"]
            figures = check_parity(loaded.model, tmp / MODEL_NAME, mode, load_tokenizer(tmp))
        config = read_json_object(tmp / "config.json", "restore the file")
        manifest = Manifest(
            task=task, opset=max((o.version for o in onnx.load(str(tmp / MODEL_NAME),
                                  load_external_data=False).opset_import
                                  if o.domain in ("", "ai.onnx")), default=0),
            exporter=f"adopted from {foreign.layout} ({foreign.model_file})", inputs=inputs,
            outputs=outputs, optimized=optimized, quantization={**quant, "notes": notes},
            fused_ops=fused_ops, parity=figures,
            config={k: config[k] for k in ("architectures", "model_type", "id2label")
                    if k in config},
            versions=_versions(), source=str(src),
            # what load() read from the folder as it was (a sentence-transformers folder's own)
            defaults=pipeline_class(task).folder_defaults(src), sentence_transformers=stack,
            created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
        manifest.write(tmp)
        # sentence vectors: their Matryoshka sizes and int8 ranges, as export records them
        embeddings = calibrate.record(task, tmp, src, say)
        if embeddings:
            manifest.embeddings = embeddings
            manifest.write(tmp)
        say(f"writing {out}")
    return manifest
