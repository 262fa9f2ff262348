"""sparse-embedding exports: a SparseEncoder folder's task is inferred, its SpladePooling goes into
the graph (one (batch, vocab) output, fused like fill-mask's), the choice is recorded and parity
holds it to the same choice; a plain ForMaskedLM exports with --task sparse-embedding as its
trained head; int8 is judged by the sparse agreement measure."""
from __future__ import annotations

import json

import numpy as np
import onnx
import pytest

from bertonnx.runtime.cli import main
from bertonnx.runtime.core.contract import MODEL_NAME

from tests.runtime.core.pipelines._sparse import real_splade_dir, sparse_encoder_folder

pytest.importorskip("sentence_transformers")


def test_a_sparse_encoder_folder_exports_with_its_pooling_in_the_graph(tiny_checkpoint, tmp_path,
                                                                       capsys):
    folder = sparse_encoder_folder(tiny_checkpoint("fill-mask"), tmp_path / "st", "sum",
                                   "log1p_relu")
    out = tmp_path / "out"
    assert main(["export", str(folder), "--out", str(out), "--json"]) == 0   # no --task
    cap = capsys.readouterr()
    manifest = json.loads(cap.out)
    assert manifest["task"] == "sparse-embedding" and "task sparse-embedding" in cap.err
    assert manifest["config"]["head_options"] == {"pooling_strategy": "sum",
                                                  "activation_function": "log1p_relu"}
    assert manifest["parity"]["passed"]
    assert manifest["outputs"] == {"sparse_embedding": {"dtype": "float32",
                                                        "axes": {"0": "batch"}}}
    # fused as fill-mask's graph is: attention per layer, the MLM head's GELU too
    assert manifest["fused_ops"]["Attention"] == 2 and manifest["fused_ops"]["BiasGelu"] == 3
    (output,) = onnx.load(str(out / MODEL_NAME), load_external_data=False).graph.output
    dims = [d.dim_param or d.dim_value for d in output.type.tensor_type.shape.dim]
    assert dims == ["batch", manifest["config"]["vocab_size"]]   # pooled: no sequence axis
    # parity holds the export to its folder's pooling: the plain checkpoint pools by max
    assert main(["parity", str(out), "--reference", str(folder)]) == 0
    assert main(["parity", str(out), "--reference", str(tiny_checkpoint("fill-mask"))]) == 2
    err = capsys.readouterr().err
    assert "'pooling_strategy': 'max'" in err and "(the export's {'pooling_strategy': 'sum'" in err


def test_a_plain_masked_lm_exports_as_sparse_embedding_with_its_trained_head(tiny_export):
    from bertonnx.build.checkpoint import infer_task  # torch: lazy
    from bertonnx.runtime.core.manifest import Manifest

    folder = tiny_export("sparse-embedding", parity=True)
    manifest = Manifest.read(folder)
    assert manifest.untrained_head == {} and manifest.parity["passed"]
    assert manifest.config["head_options"] == {"pooling_strategy": "max",
                                               "activation_function": "relu"}
    assert infer_task(real_splade_dir()) == "fill-mask"   # no modules.json: what it says


def test_int8_is_judged_by_sparse_agreement(tmp_path):
    from bertonnx.export import ExportOptions, export_model  # torch: lazy

    manifest = export_model(real_splade_dir(), "sparse-embedding", tmp_path / "int8",
                            ExportOptions(quantize="int8"))
    figures = manifest.parity
    assert figures["mode"] == "int8" and figures["passed"]
    assert list(figures["metrics"]) == ["nearest_neighbour", "top10_overlap", "cosine_min",
                                        "cosine_mean"]
    assert figures["metrics"]["cosine_mean"] > 0.99


def test_the_sparse_measure_sees_changed_vectors():
    from bertonnx.export.agreement import task_metrics  # torch: lazy

    rng = np.random.default_rng(0)
    ref = np.maximum(rng.normal(size=(12, 300)), 0).astype(np.float32) ** 3
    same = task_metrics("sparse-embedding", [ref], [ref.copy()], None, None)
    assert same == {"nearest_neighbour": 1.0, "top10_overlap": 1.0,
                    "cosine_min": pytest.approx(1.0), "cosine_mean": pytest.approx(1.0)}
    # each vector's weights moved to other ids (one permutation for all would keep every dot
    # product, and rightly score 1 on neighbours)
    moved = np.stack([rng.permutation(row) for row in ref])
    other = task_metrics("sparse-embedding", [ref], [moved], None, None)
    assert other["top10_overlap"] < 0.2 and other["cosine_mean"] < 0.5
    assert other["nearest_neighbour"] < 0.5
