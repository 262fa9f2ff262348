"""Every family × task exported from a tiny random transformers checkpoint: fused-op counts per
family, the family's graph inputs, fp32 parity on every output, tied MLM weights stored once, and
int8 through its agreement gate where a tiny random model passes it.

Each checkpoint carries its family's kind of tokenizer (tests/conftest.py's make_checkpoint):
WordPiece for BERT, DistilBERT and ELECTRA (MPNet's with RoBERTa's specials); byte-level BPE
for RoBERTa; Unigram for XLM-R, CamemBERT and ALBERT. MPNet fuses as BERT does, each Attention
reading its relative-position bias (tests/export/test_mpnet_export.py). fp32 parity feeds ids and does not read it; int8's agreement encodes real
sentences with it.
"""
from __future__ import annotations

import json

import onnx
import pytest
import torch

from bertonnx.export import ExportOptions, export_model, fusion, parity
from bertonnx.export.int8 import quantize
from bertonnx.runtime.core.contract import (FP32_ATOL, INPUT_NAMES, MODEL_NAME, hf_class,
                                            output_names)
from bertonnx.runtime.core.errors import CheckFailed
from bertonnx.runtime.core.families import family as family_row
from bertonnx.runtime.core.manifest import Manifest

from tests.conftest import BIO, SENTIMENT, TASK_NAMES, family_spec, make_checkpoint
from tests.int8_options import check_openvino_graph, ort_int8

FAMILIES = ("bert", "distilbert", "roberta", "xlm-roberta", "camembert", "electra", "albert",
            "deberta-v2", "mpnet")
LAYERS = 2  # tests/conftest.py FAMILY_CONFIGS
LABELS = {"text-classification": SENTIMENT, "token-classification": BIO}
# ALBERT with 2 distinct groups of 2 layers, run at 4 depths: 8 layer applications.
SHARED = dict(num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2)

# Graph inputs: token_type_ids only where there is more than one token type (DistilBERT has
# none; RoBERTa-likes have one, as in Optimum's graphs).
THREE, TWO = INPUT_NAMES, INPUT_NAMES[:2]
INPUTS = {"bert": THREE, "distilbert": TWO, "roberta": TWO, "xlm-roberta": TWO,
          "camembert": TWO, "electra": THREE, "albert": THREE, "deberta-v2": TWO,
          "mpnet": TWO}


def expected_ops(family: str, task: str, layers: int = LAYERS) -> dict[str, int]:
    """The fused graph's op counts (fusion.FUSED_OPS) for a family's task. Every family fuses
    fully; they differ only in their activations and heads:

    - ALBERT's gelu_new is the tanh approximation: FastGelu where the others have BiasGelu.
    - fill-mask's head is dense -> GELU (fused with its bias) -> LayerNorm (one more
      LayerNormalization beside the layers' residual ones) -> the tied decoder.
    - ELECTRA's classifier applies GELU to a Gemm on the <s> vector, whose bias is inside the
      Gemm: a bare Gelu.
    """
    if family == "deberta-v2":
        return deberta_ops(task, layers)
    gelu = "FastGelu" if family == "albert" else "BiasGelu"
    ops = {"EmbedLayerNormalization": 1, "Attention": layers,
           "LayerNormalization": 2 * layers, gelu: layers}  # residual norms: Add + LayerNorm
    if task == "fill-mask":
        ops[gelu] += 1
        ops["LayerNormalization"] += 1
    if family == "electra" and task == "text-classification":
        ops["Gelu"] = 1
    return ops


def deberta_ops(task: str, layers: int) -> dict[str, int]:
    """DeBERTa: onnxruntime has no pattern for its disentangled attention (nor, without
    absolute positions, for its embeddings), so what fuses is the GELUs and the norms: the
    layers' two each, the embeddings' and the relative embeddings' (tests/export/
    test_deberta_export.py measures what the unfused attention costs)."""
    ops = {"LayerNormalization": 2 * layers + 2, "BiasGelu": layers}
    if task == "fill-mask":
        ops["BiasGelu"] += 1
        ops["LayerNormalization"] += 1
    if task == "text-classification":  # the ContextPooler's GELU on a Gemm (bias inside)
        ops["Gelu"] = 1
    return ops


@pytest.fixture(scope="module")
def checkpoint(tmp_path_factory, tiny_checkpoint):
    """checkpoint(family, task, **config) -> a tiny random checkpoint with the family's own
    kind of tokenizer (tests/conftest.py's make_checkpoint), built once per module."""
    root = tmp_path_factory.mktemp("family-checkpoints")
    made: dict = {}

    def get(family: str, task: str, **config):
        if not config:
            return tiny_checkpoint(family_spec(family, task))  # the session's shared one
        key = (family, task, tuple(sorted(config.items())))
        if key not in made:
            made[key] = make_checkpoint(root / f"{family}-{task}-{len(made)}", task,
                                        model_type=family, labels=LABELS.get(task), **config)
        return made[key]

    return get


@pytest.fixture(scope="module")
def exported(tmp_path_factory, checkpoint, tiny_export):
    """exported(family, task, quantize="none", **config) -> (folder, manifest), built once."""
    root = tmp_path_factory.mktemp("family-exports")
    made: dict = {}

    def get(family: str, task: str, quantize: str = "none", **config):
        if quantize == "none" and not config:  # the session's shared export, parity on
            folder = tiny_export(family_spec(family, task), parity=True)
            return folder, Manifest.read(folder)
        key = (family, task, quantize, tuple(sorted(config.items())))
        if key not in made:
            out = root / f"{family}-{task}-{quantize}-{len(made)}"
            # int8: onnxruntime's graph, which these tests read; NNCF's graph for OpenVINO
            # (3-4 s a tiny export) only where its family differs from test_openvino_int8's
            # BERT in what it quantizes: RoBERTa's fp32 embeddings (its position ids)
            options = (ort_int8() if quantize == "int8" and family not in OPENVINO_INT8
                       else ExportOptions(quantize=quantize))
            made[key] = (out, export_model(checkpoint(family, task, **config), task, out,
                                           options))
        return made[key]

    return get


GRID = [(f, t) for f in FAMILIES for t in TASK_NAMES]


# --- fp32 --------------------------------------------------------------------------------------

@pytest.mark.parametrize("family,task", GRID)
def test_fused_ops_per_family(exported, family, task):
    folder, manifest = exported(family, task)
    counts = fusion.fused_counts(onnx.load(str(folder / MODEL_NAME)))
    assert counts == manifest.fused_ops
    assert counts == expected_ops(family, task)


@pytest.mark.parametrize("family,task", GRID)
def test_parity_on_every_output(exported, family, task):
    folder, manifest = exported(family, task)
    p = manifest.parity
    assert p["mode"] == "fp32" and p["passed"]
    assert set(p["max_abs"]) == set(output_names(task))
    assert all(0 <= v <= FP32_ATOL for v in p["max_abs"].values()), p["max_abs"]
    # "max" is the longest sequence the position table covers: RoBERTa's positions start
    # after the padding id, so it is max_position_embeddings - pad_token_id - 1.
    cfg = json.loads((folder / "config.json").read_text())
    longest = cfg["max_position_embeddings"]
    if family_row(family).positions_from_padding:
        longest -= cfg["pad_token_id"] + 1  # 66 - 1 - 1
    assert max(s for _, s in p["shapes"]) == longest == 64
    assert {b for b, _ in p["shapes"]} == {1, 2, 7}


@pytest.mark.parametrize("family,task", GRID)
def test_graph_inputs_and_manifest(exported, family, task):
    folder, manifest = exported(family, task)
    g = onnx.load(str(folder / MODEL_NAME)).graph
    assert tuple(i.name for i in g.input) == INPUTS[family]
    assert tuple(manifest.inputs) == INPUTS[family]
    assert [o.name for o in g.output] == list(output_names(task))
    cfg = json.loads((folder / "config.json").read_text())
    assert cfg["model_type"] == manifest.config["model_type"] == family
    assert cfg["architectures"] == [manifest.config["architecture"]] == [hf_class(task, family)]


@pytest.mark.parametrize("family", [f for f in FAMILIES if family_row(f).fully_fused])
def test_tied_mlm_weight_stored_once(exported, family):
    folder, manifest = exported(family, "fill-mask")
    g = onnx.load(str(folder / MODEL_NAME)).graph
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    tables = [i.name for i in g.initializer if len(i.dims) == 2 and vocab in i.dims]
    assert len(tables) == 1
    embed = [n for n in g.node if n.op_type == "EmbedLayerNormalization"]
    decoder = [n for n in g.node if n.op_type == "Gemm" and tables[0] in n.input]
    assert embed[0].input[2] == tables[0] and len(decoder) == 1


def test_albert_shared_layers_fuse_per_application_and_store_once(exported):
    folder, manifest = exported("albert", "fill-mask", **SHARED)
    applications = SHARED["num_hidden_layers"] * SHARED["inner_group_num"]
    assert manifest.fused_ops == expected_ops("albert", "fill-mask", applications)
    assert manifest.parity["passed"]
    g = onnx.load(str(folder / MODEL_NAME)).graph
    qkv = {n.input[1] for n in g.node if n.op_type == "Attention"}
    assert len(qkv) == SHARED["num_hidden_groups"] * SHARED["inner_group_num"]  # 4 distinct
    assert {i.name for i in g.initializer} >= qkv


def test_per_layer_follows_albert_schedule(exported, checkpoint):
    """Nudging one shared layer parts every application of it, and only from its first run."""
    from bertonnx.build import load_pretrained

    folder, _ = exported("albert", "fill-mask", **SHARED)
    model = load_pretrained(checkpoint("albert", "fill-mask", **SHARED), "fill-mask")
    clean = parity.per_layer(model, folder / MODEL_NAME)
    assert clean["first_parting"] is None
    assert [r["where"] for r in clean["layers"]] == ["embeddings"] + [
        f"layer {i} (group {i // 4}.{i % 2})" for i in range(8)]
    with torch.no_grad():  # group 1, inner layer 0: runs at applications 4 and 6
        w = model.encoder.layers[1][0].ffn.down.weight
        w.add_(0.05 * torch.randn(w.shape, generator=torch.Generator().manual_seed(0)))
    rows = {r["where"]: r["max_abs"] for r in parity.per_layer(model, folder / MODEL_NAME)[
        "layers"]}
    assert all(rows[f"layer {i} (group 0.{i % 2})"] <= FP32_ATOL for i in range(4))
    assert rows["layer 4 (group 1.0)"] > FP32_ATOL


# --- int8 ----------------------------------------------------------------------------------

INT8 = [(f, t) for f in ("bert", "distilbert", "roberta")
        for t in ("fill-mask", "text-classification")]
OPENVINO_INT8 = ("roberta",)  # int8 exports that also write NNCF's graph, as users get it


@pytest.mark.parametrize("family,task", INT8)
def test_int8_passes_the_agreement_gate(exported, family, task):
    folder, manifest = exported(family, task, "int8")
    assert manifest.parity["mode"] == "int8" and manifest.parity["passed"]
    assert manifest.fused_ops["QAttention"] == LAYERS
    g = onnx.load(str(folder / MODEL_NAME)).graph
    vocab = json.loads((folder / "config.json").read_text())["vocab_size"]
    tables = [i for i in g.initializer if len(i.dims) == 2 and vocab in i.dims]
    assert len(tables) == 1  # the word table, once, whatever reads it
    embed = [n for n in g.node if n.op_type.endswith("EmbedLayerNormalization")]
    if family == "roberta":
        # Its computed position ids have no QEmbedLayerNormalization input: fp32, ids kept.
        assert embed[0].op_type == "EmbedLayerNormalization" and embed[0].input[8]
        assert tables[0].data_type == onnx.TensorProto.FLOAT
    else:
        assert embed[0].op_type == "QEmbedLayerNormalization"
        assert tables[0].data_type == onnx.TensorProto.UINT8
    if family in OPENVINO_INT8:
        check_openvino_graph(folder, manifest)


def test_roberta_int8_needs_its_position_ids(checkpoint, tmp_path, monkeypatch):
    """Why quantize keeps RoBERTa's embeddings fp32: quantized, they lose the position ids
    (positions restart at 0) and the agreement gate refuses the graph."""
    monkeypatch.setattr(quantize, "_positioned_embeddings", lambda proto, *a: [])
    with pytest.raises(CheckFailed, match="int8 refused"):  # one recipe: no fallback to try
        export_model(checkpoint("roberta", "feature-extraction"), "feature-extraction",
                     tmp_path / "q", ExportOptions(quantize="int8", int8_recipe="s8"))

