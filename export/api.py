"""`export_model`: a checkpoint (or model) in, a complete export folder out.

    load -> torch.onnx.export (fp32) -> fuse -> [int8 | fp16] -> tokenizer + config.json
         -> parity -> bertonnx.json -> rename into place

Everything is written into a hidden sibling folder and renamed to `out` only once the manifest is
written (runtime/core/atomic.py's `publishing`), so an interrupted export never leaves a folder
that looks complete. Scratch files (the raw graph, the optimizer's and the quantizer's copies)
live inside that folder too, so a SIGKILL leaves nothing in /tmp and the next export to `out`
removes it all. An export holds an exclusive lock on `out` (`flock` on `.OUT.lock` beside it)
from its first check to the rename: a second export (or `adopt`, export/adopt.py, which takes
the same lock) to the same `out` fails at once instead of both reporting success.
"""
from __future__ import annotations

import fcntl
import logging
import os
import platform
import tempfile
from contextlib import contextmanager
from dataclasses import dataclass
from datetime import datetime, timezone
from importlib import metadata
from pathlib import Path
from typing import TYPE_CHECKING, Callable, Iterator

import onnx

from bertonnx.build import Bert, LoadedCheckpoint, load_checkpoint, load_tokenizer
from bertonnx.build.save import write_config
from bertonnx.runtime.core.contract import INPUT_DTYPE, INPUT_AXES, MODEL_NAME
from bertonnx.runtime.core.tasks import EXPORT_TASKS, OUTPUTS, pipeline_class
from bertonnx.runtime.core.errors import ArtifactError, ConfigError, InputError, TaskMismatchError
from bertonnx.runtime.core.atomic import publishing
from bertonnx.runtime.core import cpu  # cpu.this_kind at call time: tests stand in for it
from bertonnx.runtime.core import untrained as untrained_head
from bertonnx.runtime.core.manifest import Manifest

from . import (bge_m3, calibrate, engines, fusion, graph, memory, openvino_int8, parity, sentence,
               variants)
from .int8.recipes import recipe, target
from .precisions import PRECISIONS, precision

if TYPE_CHECKING:
    from .int8.settings import Int8Settings

log = logging.getLogger("bertonnx")



@dataclass(frozen=True)
class ExportOptions:
    opset: int = 17
    optimize: bool = True          # onnxruntime BERT fusion (Attention, SkipLayerNorm, ...)
    quantize: str = "none"         # a row of precisions.PRECISIONS: "none" | "int8" | "fp16"
    parity: bool = True            # prove the graph against the torch model before finishing
    force: bool = False            # replace a non-empty `out`
    tokenizer: str | Path | None = None  # tokenizer folder; default: the model's source folder
    # int8: the recipes of the CPU kind `target_cpu` names ("auto": this machine's), tried
    # fastest first until one passes the agreement gate (export/int8/recipes.py); or one
    # recipe by name; or explicit dynamic settings (`int8`), which win over both.
    target_cpu: str = "auto"
    int8_recipe: str | None = None
    int8: "Int8Settings | None" = None
    measure_recipes: bool = False  # time the target's passing recipes here, keep the fastest
    # int8: NNCF's static int8 graph for OpenVINO beside model.onnx (export/openvino_int8.py):
    # None writes it where nncf and openvino are installed, True requires them, False never
    openvino_int8: bool | None = None
    calibration: Path | None = None  # its calibration text, one per line (default: shipped)
    # export a head the checkpoint did not train for the task (to fine-tune later); refused
    # without it, recorded in the manifest with it (runtime/core/untrained.py)
    allow_untrained_head: bool = False

    def __post_init__(self):
        if self.quantize not in PRECISIONS:
            raise InputError(f"unknown quantization {self.quantize!r}",
                             f"use one of {', '.join(PRECISIONS)}")
        if not 14 <= self.opset <= 20:
            # 14..20: what the TorchScript exporter writes for this model and the fusion tests
            # cover (below 17, LayerNorm is exported decomposed and still fuses).
            raise InputError(f"opset {self.opset} is outside 14..20", "use --opset 17")
        if self.quantize != "none" and not self.optimize:
            raise InputError(f"--quantize {self.quantize} works on the fused graph",
                             "drop --no-optimize")
        if self.target_cpu != "auto":
            target(self.target_cpu)
        if self.int8_recipe is not None:
            recipe(self.int8_recipe)
        if self.measure_recipes:
            _check_measurable(self)
        if (self.openvino_int8 or self.calibration is not None) and self.quantize != "int8":
            raise InputError("an OpenVINO int8 graph (--openvino-int8, --calibration) is made "
                             "beside an int8 export", "add --quantize int8")
        if self.openvino_int8 and (lacks := openvino_int8.missing()):
            raise InputError(f"--openvino-int8 needs {lacks}, which is not installed",
                             "pip install 'bertonnx[nncf]'")
        if self.calibration is not None and not Path(self.calibration).is_file():
            raise InputError(f"calibration file {self.calibration} does not exist",
                             "pass a text file, one text per line")

    @property
    def writes_openvino_int8(self) -> bool:
        return self.quantize == "int8" and self.openvino_int8 is not False and (
            self.openvino_int8 or openvino_int8.missing() is None)


def _check_measurable(o: ExportOptions) -> None:
    """--measure-recipes times candidates on this machine: only for int8, with the parity
    check that judges them, for this machine's own kind of CPU."""
    if o.quantize != "int8" or not o.parity or o.int8 is not None or o.int8_recipe:
        raise InputError("--measure-recipes times the target's int8 recipes and needs their "
                         "agreement check", "use it with --quantize int8, parity on, and no "
                         "--int8-recipe")
    if o.target_cpu not in ("auto", cpu.this_kind()):
        raise InputError(f"--measure-recipes measures this CPU ({cpu.this_kind()}), not "
                         f"{o.target_cpu}", "drop --measure-recipes, or use --target-cpu auto")


def resolve_model(model: str | Path | Bert | LoadedCheckpoint, task: str, *,
                  warn: bool = True) -> LoadedCheckpoint:
    """The model for `task` with its source folder: loaded from a folder or hub id (`default`
    resolves in bertonnx.runtime.core.defaults), or given in memory (a bare `Bert` has no folder to
    take a tokenizer from)."""
    if task not in EXPORT_TASKS:
        raise ConfigError(f"task {task!r} cannot be exported", f"use one of {', '.join(EXPORT_TASKS)}")
    if isinstance(model, LoadedCheckpoint):
        loaded = model
    elif isinstance(model, Bert):
        loaded = LoadedCheckpoint(model, None, [])
    else:
        return load_checkpoint(model, task, warn=warn)
    if loaded.model.task != task:
        raise TaskMismatchError(f"the model was built for {loaded.model.task}, not {task}",
                                f"load it with task {task!r}")
    loaded.model.eval()
    return loaded


def _check_target(out: Path, force: bool) -> None:
    if out.exists() and not out.is_dir():
        raise ArtifactError(f"{out} is a file", "choose a folder for --out")
    if out.is_dir() and any(out.iterdir()) and not force:
        raise ArtifactError(f"{out} is not empty", "choose an empty folder or pass --force")


def _versions() -> dict:
    out = {"python": platform.python_version()}
    for pkg in ("bertonnx", "torch", "onnx", "onnxruntime", "tokenizers", "numpy"):
        try:
            out[pkg] = metadata.version(pkg)
        except metadata.PackageNotFoundError:
            pass
    return out


def _io(task: str, input_names: tuple[str, ...]) -> tuple[dict, dict]:
    inputs = {n: {"dtype": INPUT_DTYPE, "axes": {str(k): v for k, v in INPUT_AXES.items()}}
              for n in input_names}
    outputs = {n: {"dtype": "float32", "axes": {str(k): v for k, v in ax.items()}}
               for n, ax in OUTPUTS[task]}
    return inputs, outputs


def _config_summary(model: Bert) -> dict:
    c = model.config
    return {"architecture": model.hf_class, "model_type": c.model_type,
            "vocab_size": c.vocab_size,
            "hidden_size": c.hidden_size, "num_hidden_layers": c.num_hidden_layers,
            "num_attention_heads": c.num_attention_heads,
            "max_position_embeddings": c.max_position_embeddings,
            "type_vocab_size": c.type_vocab_size, "pad_token_id": c.pad_token_id,
            "num_labels": c.num_labels, "id2label": {str(k): v for k, v in c.id2label.items()},
            "problem_type": c.problem_type,
            # what the model folder chose about the head (a SparseEncoder's SpladePooling)
            **({"head_options": model.head_options} if model.head_options else {})}


@contextmanager
def locked(out: Path) -> Iterator[None]:
    """Hold the exclusive lock on `out` (`.OUT.lock` beside it); ArtifactError at once when
    another process holds it. The kernel drops a flock when its holder dies, so a killed
    export never leaves `out` locked."""
    out.parent.mkdir(parents=True, exist_ok=True)
    path = out.with_name(f".{out.name}.lock")
    while True:
        fd = os.open(path, os.O_RDWR | os.O_CREAT, 0o644)
        try:
            fcntl.flock(fd, fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:
            holder = os.read(fd, 32).decode("ascii", "replace").strip() or "?"
            os.close(fd)
            raise ArtifactError(f"another export or adopt is writing {out} (pid {holder} holds "
                                f"{path})",
                                "wait for it to finish, or choose another --out") from None
        try:
            same = os.stat(path).st_ino == os.fstat(fd).st_ino
        except FileNotFoundError:
            same = False
        if same:
            break
        os.close(fd)  # its holder removed the file between our open and flock: take a new one
    try:
        os.ftruncate(fd, 0)
        os.write(fd, f"{os.getpid()}\n".encode())
        yield
    finally:
        os.unlink(path)  # before unlocking, so no one locks a file that is going away
        os.close(fd)


def export_model(model: str | Path | Bert | LoadedCheckpoint, task: str, out: str | Path,
                 options: ExportOptions = ExportOptions(), *,
                 progress: Callable[[str], None] | None = None) -> Manifest:
    """Export `model` for `task` into `out` (see module docstring); returns the manifest."""
    out = Path(out).expanduser()
    with locked(out):
        return _export(model, task, out, options, progress or (lambda msg: None))


def _export(model, task: str, out: Path, options: ExportOptions, say) -> Manifest:
    _check_target(out, options.force)
    in_memory = isinstance(model, (Bert, LoadedCheckpoint))
    say(f"loading {model if not in_memory else 'model'} for {task}")
    # export reports an untrained head itself: a refusal, or one warning with the flag
    loaded = resolve_model(model, task, warn=False)
    # a model the task cannot use (reranking with several labels; zero-shot without an
    # entailment class) is refused before converting, as load would refuse the export
    pipeline_class(task).check_model(_config_summary(loaded.model),
                                     "the model" if in_memory else str(model))
    untrained = loaded.untrained_head()
    if untrained and not options.allow_untrained_head:
        raise untrained_head.refusal(str(loaded.source_dir or "the model") if in_memory
                                     else str(model), untrained, task)
    if untrained:
        log.warning("exporting with --allow-untrained-head: %s; fine-tune it before use",
                    untrained_head.describe(untrained, task))
    tok_dir = options.tokenizer or loaded.source_dir
    if tok_dir is None:
        raise ArtifactError("the model has no source folder to take the tokenizer from",
                            "pass ExportOptions(tokenizer=FOLDER), or the LoadedCheckpoint "
                            "that bertonnx.build.load_checkpoint returns")
    tokenizer = load_tokenizer(tok_dir)
    source = str((loaded.source_dir or "") if in_memory else model)
    # the folder's own parameter defaults (a sentence-transformers folder's pooling and
    # normalize), which the export's pipeline then uses
    defaults = (pipeline_class(task).folder_defaults(loaded.source_dir)
                if loaded.source_dir is not None else {})
    source_dir = loaded.source_dir
    # A model export loaded itself is dropped once its outputs are taken; the caller's stays.
    held = _Held(loaded.model, owned=not in_memory)
    del loaded
    with publishing(out) as tmp:
        # a sentence-transformers folder's modules after the encoder, and their weights
        stack = sentence.carry(source_dir, task, tmp)
        manifest = _build(held, task, tmp, options, tokenizer, say, source=source,
                          defaults=defaults, untrained=untrained, stack=stack)
        # sentence vectors: their Matryoshka sizes and int8 ranges, from the written graph
        embeddings = calibrate.record(task, tmp, source_dir, say)
        if embeddings:
            manifest.embeddings = embeddings
            manifest.write(tmp)
        say(f"writing {out}")
    return manifest


@dataclass
class _Held:
    """The torch model while export needs it (tracing, then the reference outputs)."""
    model: Bert | None
    owned: bool

    def drop(self) -> None:
        if self.owned:
            self.model = None
        memory.release()


def _build(held: _Held, task: str, tmp: Path, options: ExportOptions, tokenizer, say,
           source, defaults: dict, untrained: dict, stack: dict) -> Manifest:
    """One model-sized buffer at a time: trace -> reference outputs (torch) -> drop the torch
    model -> fuse -> convert -> write -> parity (onnxruntime) against the kept outputs."""
    m = held.model
    c, hf_class, names = m.config, m.hf_class, graph.input_names(m)
    param_bytes, summary = graph.unique_param_bytes(m), _config_summary(m)
    row = precision(options.quantize)
    # scratch inside the partial folder: gone before the manifest hashes the folder, and
    # removed with the folder by the next export if this one is killed
    with tempfile.TemporaryDirectory(prefix=".scratch-", dir=tmp) as scratch:
        scratch = Path(scratch)
        raw = scratch / "raw.onnx"
        say(f"exporting to ONNX (opset {options.opset}, {graph.EXPORTER})")
        graph.export_onnx(m, raw, options.opset)
        memory.release()  # the exporter's protobuf copies, before the reference runs
        reference = None
        if options.parity:
            say("running the torch model for parity")
            reference = row.reference(m, tokenizer, scratch / "reference")
        del m
        held.drop()
        if options.optimize:
            say(f"fusing (onnxruntime transformer optimizer, model_type "
                f"{c.family.ort_model_type})")
            proto = fusion.fuse(raw, c.num_attention_heads, c.hidden_size, scratch, lean=True,
                                model_type=c.model_type, config=c)
            fusion.check_fused(fusion.fused_counts(proto), c)
            memory.release()
        else:
            proto = onnx.load(str(raw))
        raw.unlink()
        fp32_bytes = proto.ByteSize() if graph._fits_bytesize(proto) else None
        tokenizer.save(tmp)
        write_config(c, hf_class, tmp)
        model_path = tmp / MODEL_NAME
        job = variants.Job(row, options, c, scratch, tokenizer, reference, task, say,
                           keep_fused=options.writes_openvino_int8)
        choose = variants.fastest_passing if options.measure_recipes else variants.first_passing
        box = [proto]
        del proto
        chosen = choose(job, box, model_path)
        quant, counts, figures = chosen.quantization, chosen.fused_ops, chosen.parity
        if bge_m3.carries_heads(stack) and reference is not None and options.quantize == "none":
            # its heads run after the graph (pipelines/bge_m3.py): the three outputs judged too
            figures = {**figures, "heads": bge_m3.judge_heads(reference, model_path, tmp, stack)}
        # the same graph on the other engines this machine has, against the same torch outputs
        on_engines = engines.judge(reference, model_path, options.quantize, say)
        if options.writes_openvino_int8:   # an int8 export's second graph, for OpenVINO
            record = openvino_int8.write(scratch / variants.FUSED, tmp, task=task,
                                         tokenizer=tokenizer, max_len=c.max_tokens,
                                         calibration=options.calibration, say=say)
            on_engines[openvino_int8.KEY] = openvino_int8.judge(reference, tmp, record, row,
                                                                say)

        size = graph.graph_bytes(model_path)
        quant["size"] = {"model_bytes": size, "unique_param_bytes": param_bytes,
                         "ratio_to_params": round(size / param_bytes, 4)}
        if options.quantize != "none" and fp32_bytes:
            quant["size"]["ratio_to_fp32_graph"] = round(size / fp32_bytes, 4)
    inputs, outputs = _io(task, names)
    manifest = Manifest(
        task=task, opset=options.opset, exporter=graph.EXPORTER, inputs=inputs, outputs=outputs,
        optimized=options.optimize, quantization=quant, fused_ops=counts, parity=figures,
        engines=on_engines, config=summary, versions=_versions(),
        source=source, defaults=defaults, untrained_head=untrained, sentence_transformers=stack,
        created=datetime.now(timezone.utc).isoformat(timespec="seconds"))
    manifest.write(tmp)
    return manifest


def _judge(row, reference, model_path: Path, task: str) -> dict:
    """The row's verdict on the graph at `model_path`; raises CheckFailed when it refuses."""
    figures = row.judge(reference, parity.session(model_path))
    if figures.get("passed", True):
        return figures
    raise row.refusal(task, figures)


def check_parity(m: Bert, model_path: Path, mode: str, tokenizer=None) -> dict:
    """The parity figures that fit `mode` (its precision's judge); raises CheckFailed when the
    judge refuses the graph."""
    row = precision(mode)
    with tempfile.TemporaryDirectory(prefix="bertonnx-parity-") as d:
        return _judge(row, row.reference(m, tokenizer, Path(d)), model_path, m.task)


def parity_report(folder: str | Path, reference: str | Path | Bert | LoadedCheckpoint, *,
                  per_layer: bool = False) -> dict:
    """Parity of an existing export against `reference`; `passed` is False outside tolerance.

    Unlike `check_parity` it returns the report instead of raising, so the CLI can print it
    before exiting 1.
    """
    folder = Path(folder)
    manifest = Manifest.read(folder)
    loaded = resolve_model(reference, manifest.task)
    differ = parity.reference_differences(manifest.config, manifest.task,
                                          manifest.untrained_head, loaded)
    if differ:
        raise InputError(f"the reference is not the model {folder} was exported from: "
                         + "; ".join(differ), "pass --reference the checkpoint it was made "
                         "from" + (f" ({manifest.source})" if manifest.source else ""))
    m = loaded.model
    mode = manifest.quantization.get("mode", "none")
    tokenizer = load_tokenizer(folder)
    row = precision(mode)
    with tempfile.TemporaryDirectory(prefix="bertonnx-parity-") as d:
        reference = row.reference(m, tokenizer, Path(d))
        report = row.judge(reference, parity.session(folder / MODEL_NAME))
        # and on every other engine this machine runs the graph with (informative: the exit
        # status is the CPU provider's verdict, as at export)
        report["engines"] = engines.judge(reference, folder / MODEL_NAME, mode, lambda m: None)
    if loaded.head_initialised:
        # load_checkpoint draws missing heads from a fixed seed, so the export of the same
        # folder matches; say so, since such a head is not a trained one.
        report["note"] = ("reference head initialised at load (seed 0): "
                          + ", ".join(loaded.head_initialised[:3]))
    if per_layer:
        report["per_layer"] = parity.per_layer(m, folder / MODEL_NAME)
    return report
