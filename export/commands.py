"""`bertonnx export`, `bertonnx parity` and `bertonnx demo`: click maps flags onto the functions
in api.py; progress goes to stderr, results (or `--json`) to stdout."""
from __future__ import annotations

import json
from pathlib import Path

import click

from bertonnx.runtime.core.tasks import EXPORT_TASKS
from bertonnx.runtime.core.cpu import TARGET_KINDS
from bertonnx.runtime.core.engines import summary_lines
from bertonnx.runtime.core.errors import CheckFailed
from bertonnx.runtime.core.postprocess import cosine_matrix

from .int8.recipes import RECIPES
from .precisions import PRECISIONS, summary_line


def _progress(msg: str) -> None:
    click.echo(f"bertonnx: {msg}", err=True)


def _fused_line(counts: dict) -> str:
    return ", ".join(f"{op} {n}" for op, n in counts.items()) or "none (not optimized)"


@click.command()
@click.argument("model")
@click.option("--task", type=click.Choice(EXPORT_TASKS), default=None,
              help="What the graph answers [default: from config.json's architectures].")
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="Export folder.")
@click.option("--opset", default=17, show_default=True, type=int)
@click.option("--optimize/--no-optimize", default=True, show_default=True,
              help="Fuse with onnxruntime's BERT optimizer.")
@click.option("--quantize", type=click.Choice(list(PRECISIONS)), default="none",
              show_default=True,
              help=" ".join(f"{p.name}: {p.help}" for p in PRECISIONS.values()))
@click.option("--target-cpu", type=click.Choice(["auto", *TARGET_KINDS]), default="auto",
              show_default=True,
              help="The CPU kind an int8 graph is made for (auto: this machine's); its recipes "
                   "are tried fastest first until one passes the agreement gate.")
@click.option("--int8-recipe", type=click.Choice(list(RECIPES)), default=None,
              help="One int8 recipe instead of the target's list.")
@click.option("--measure-recipes", is_flag=True,
              help="Time the target's int8 recipes that pass the agreement gate on this "
                   "machine and keep the fastest (the manifest records the figures).")
@click.option("--openvino-int8/--no-openvino-int8", default=None,
              help="With --quantize int8: also write NNCF's static int8 graph for OpenVINO "
                   "(model.openvino-int8.xml), which `auto` runs on CPUs with bf16 where its "
                   "parity passed [default: when nncf and openvino are installed].")
@click.option("--calibration", type=click.Path(exists=True, dir_okay=False, path_type=Path),
              help="Text to calibrate that graph on, one text per line [default: 300 shipped "
                   "sentences and the same joined into passages].")
@click.option("--force", is_flag=True, help="Replace a non-empty --out folder.")
@click.option("--allow-untrained-head", is_flag=True,
              help="Export even though the checkpoint did not train the task's head (to "
                   "fine-tune it later); the manifest records which weights.")
@click.option("--no-parity", is_flag=True, help="Skip the parity check (not recommended).")
@click.option("--tokenizer", type=click.Path(path_type=Path),
              help="Tokenizer folder, when MODEL's folder has none.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def export(model, task, out, opset, optimize, quantize, target_cpu, int8_recipe,
           measure_recipes, openvino_int8, calibration, force, allow_untrained_head, no_parity,
           tokenizer, as_json):
    """Export MODEL (a checkpoint folder, a hub id, or `default` for the bundled MiniLM) to ONNX."""
    # lazy: torch; this module is imported to build `bertonnx export --help`
    from .api import ExportOptions, export_model

    if task is None:
        from bertonnx.build.checkpoint import inferred_task  # lazy: torch, as above

        task, came_from = inferred_task(model)
        _progress(f"task {task} ({came_from})")
    opts = ExportOptions(opset=opset, optimize=optimize, quantize=quantize, parity=not no_parity,
                         force=force, tokenizer=tokenizer, target_cpu=target_cpu,
                         int8_recipe=int8_recipe, measure_recipes=measure_recipes,
                         allow_untrained_head=allow_untrained_head,
                         openvino_int8=openvino_int8, calibration=calibration)
    manifest = export_model(model, task, out, opts, progress=_progress)
    if as_json:
        click.echo(manifest.to_json(), nl=False)
        return
    size = manifest.quantization.get("size", {}).get("model_bytes", 0)
    q = manifest.quantization
    made_for = (f", recipe {q['recipe']} for {q['target']} CPUs ({q['target_chosen_by']})"
                if "recipe" in q else "")
    click.echo(f"exported {task} to {out} ({size / 1e6:.1f} MB, opset {opset}, "
               f"quantization {quantize}{made_for})")
    click.echo(f"fused ops: {_fused_line(manifest.fused_ops)}")
    click.echo(summary_line(manifest.parity))
    for line in summary_lines(manifest.engines):
        click.echo(line)



@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--out", "out", required=True, type=click.Path(path_type=Path), help="Export folder.")
@click.option("--task", type=click.Choice(EXPORT_TASKS), default=None,
              help="What the graph answers [default: from config.json's architectures].")
@click.option("--quantize", type=click.Choice(list(PRECISIONS)), default="none",
              show_default=True, help="Convert the (fused) graph as `export --quantize` does.")
@click.option("--optimize/--no-optimize", default=True, show_default=True,
              help="Fuse with onnxruntime's BERT optimizer where the graph allows.")
@click.option("--reference", default=None,
              help="The checkpoint the graph was made from: parity is checked against it.")
@click.option("--force", is_flag=True, help="Replace a non-empty --out folder.")
@click.option("--json", "as_json", is_flag=True, help="Print the manifest as JSON.")
def adopt(folder, out, task, quantize, optimize, reference, force, as_json):
    """Turn FOLDER, exported by Optimum or for transformers.js, into a verified export."""
    # lazy: torch and onnx; this module is imported to build `bertonnx adopt --help`
    from .adopt import AdoptOptions, adopt as run_adopt

    manifest = run_adopt(folder, out, AdoptOptions(task=task, quantize=quantize,
                                                   optimize=optimize, reference=reference,
                                                   force=force), progress=_progress)
    if as_json:
        click.echo(manifest.to_json(), nl=False)
        return
    click.echo(f"adopted {folder} as a {manifest.task} export in {out} "
               f"(quantization {manifest.quantization['mode']})")
    click.echo(f"fused ops: {_fused_line(manifest.fused_ops)}")
    click.echo(summary_line(manifest.parity))

@click.command()
@click.argument("folder", type=click.Path(path_type=Path))
@click.option("--reference", required=True, help="The checkpoint the export came from.")
@click.option("--per-layer", is_flag=True, help="Also report the first layer whose hidden states part.")
@click.option("--json", "as_json", is_flag=True, help="Print the report as JSON.")
def parity(folder, reference, per_layer, as_json):
    """Check an export FOLDER against its torch reference; exit 1 outside tolerance."""
    # lazy: torch; this module is imported to build `bertonnx parity --help`
    from .api import parity_report

    report = parity_report(folder, reference, per_layer=per_layer)
    if as_json:
        click.echo(json.dumps(report, indent=2))
    else:
        click.echo(summary_line(report))
        for line in summary_lines(report.get("engines", {})):
            click.echo(line)
        if per_layer:
            for row in report["per_layer"]["layers"]:
                click.echo(f"  {row['where']:>12}: max |Δ| {row['max_abs']:.2e}")
            first = report["per_layer"]["first_parting"]
            click.echo(f"  first layer past {report['per_layer']['atol']:g}: {first or 'none'}")
    if not report.get("passed", True):
        raise CheckFailed(f"{folder} is outside tolerance against {reference}",
                          "export again, or run with --per-layer to find where it parts")


DEMO_FOLDER = "minilm"  # under --out


@click.command()
@click.option("--out", "out", type=click.Path(path_type=Path), default=Path("artifacts"),
              show_default=True, help=f"Folder to put the demo export ({DEMO_FOLDER}) under.")
def demo(out):
    """Export the bundled MiniLM (feature-extraction), fused, and show its parity and fused ops."""
    # lazy: torch; this module is imported to build `bertonnx demo --help`
    from .api import ExportOptions, export_model

    # the README's examples read artifacts/minilm: the same export, made by its quick start
    target = out / DEMO_FOLDER
    # The demo owns this folder: re-running it replaces the previous demo export.
    manifest = export_model("default", "feature-extraction", target, ExportOptions(force=True),
                            progress=_progress)
    size = manifest.quantization["size"]["model_bytes"]
    click.echo(f"exported all-MiniLM-L6-v2 (feature-extraction) to {target} ({size / 1e6:.1f} MB)")
    click.echo(f"fused ops: {_fused_line(manifest.fused_ops)}")
    click.echo(summary_line(manifest.parity))
    _runtime_answers(target)


def _runtime_answers(folder: Path) -> None:
    """The demo's runtime step, through the library users call: embed two sentences with the
    export just made, torch-free, then ask the shipped fill-mask default."""
    # lazy: onnxruntime and tokenizers, which `bertonnx export --help` need not load
    from bertonnx.runtime import load

    embed = load(folder, task="feature-extraction")
    pair = ["A man is playing a guitar.", "Someone plays an instrument."]
    other = "The stock market fell sharply today."
    sims = cosine_matrix(embed([*pair, other], normalize=True, return_tensors=True))
    click.echo("answers through bertonnx.runtime (onnxruntime):")
    click.echo(f"  cosine({pair[0]!r}, {pair[1]!r}) = {sims[0, 1]:.4f}")
    click.echo(f"  cosine({pair[0]!r}, {other!r}) = {sims[0, 2]:.4f}")
    # The shipped fill-mask default (bertonnx.runtime.core.defaults): MiniLM with an MLM head
    # trained here on English text, fp32.
    fill = load("default", task="fill-mask")
    for text in ("Paris is the [MASK] of France.", "The man went to the [MASK] to buy milk."):
        best = ", ".join(f"{r['token_str']} {r['score']:.2f}" for r in fill(text, top_k=3))
        click.echo(f"  fill-mask default {text!r}: {best}")
