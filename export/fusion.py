"""Fusion with onnxruntime's transformer optimizer, and its checkable outcome.

The optimizer's model_type is the family row's (runtime/core/families.py `ort_model_type`):
"bert" for every family bertonnx loads. ModernBERT's rotary attention, which the optimizer has
no pattern for, is fused by bertonnx's own pass first (rotary_attention.py). DeBERTa's
disentangled attention has no pattern either and stays unfused: its row's `fully_fused` is
False, and check_fused lets it be (docs/families.md measures what that costs).

Graph before / after, per encoder layer:

    MatMul+Add ×3 -> Reshape/Transpose -> MatMul/Div/Add(mask)/Softmax/MatMul -> ...   ==> Attention
    Add(residual) -> LayerNormalization                                               (kept)
    MatMul -> Add(bias) -> Gelu                                                       ==> BiasGelu
    MatMul -> Add(bias) -> tanh-approximated Gelu (ALBERT's gelu_new)                 ==> FastGelu
    Gather(word)+Gather(pos)+Gather(type) -> LayerNormalization  (once)               ==> EmbedLayerNormalization

Every family fuses fully (Attention == layer applications, EmbedLayerNormalization 1) because
build/model.py writes two sums in the order the optimizer's patterns read them (commutative, so
the numbers do not change):

- The residual Add takes the sublayer's output first. fusion_attention.py walks up from the
  norm to the *first* Add parent as the attention output; after ELECTRA's and ALBERT's
  embedding projection (a MatMul+Add) the residual is an Add too, and with it first the first
  layer's attention did not fuse (1 of 2 on a 2-layer model).
- RoBERTa sums word + position first, then token type. Its positions come from a CumSum over
  the padding, which fusion_embedlayer.py's BERT and DistilBERT position patterns do not match
  (its RoBERTa pattern is commented out upstream: the kernel numbers positions from 0); its
  GPT-2 pattern, Add(Gather(word), Gather(pos)) with an optional segment Gather, takes any
  position ids and passes them to EmbedLayerNormalization's position_ids input, which the
  kernel honours. A RoBERTa graph without token_type_ids still fuses: the zeros it makes are
  the segment ids.
- ALBERT and ELECTRA project after the embedding LayerNorm; fusion_embedlayer.py accepts a
  MatMul+Add between the norm and the first Attention ("for Albert"). ALBERT's shared layers
  are unrolled by the exporter, one Attention per application; each gets its own packed QKV
  weight, which `share_identical_initializers` stores once again.

The residual Add -> LayerNormalization pairs end up unfused: the optimizer fuses them (its
RoBERTa embedding pattern needs the fused form) and `unfuse_residual_norms` splits them again,
because onnxruntime's CPU SkipLayerNormalization kernel is 3.8× slower than the pair
(runtime/session.py's CPU_DISABLED_OPTIMIZERS, where CPU sessions also stop onnxruntime from
fusing them at load; CUDA sessions fuse them at load into the fast GPU kernel).

`opt_level=1` (the optimizer's default for BERT) runs only onnxruntime's portable basic
rewrites before the Python fusions, so the saved graph holds no CPU- or GPU-specific kernels.
Reference: onnxruntime/python/tools/transformers/onnx_model_bert.py (is_fully_optimized).
Fused Attention reads the mask as per-row lengths, i.e. it assumes RIGHT padding (onnxruntime
issue 18945): the runtime pads right, and parity checks right-padded batches.
"""
from __future__ import annotations

import hashlib
import logging
import tempfile
from pathlib import Path

import onnx
from onnx import helper

from bertonnx.build import BertConfig
from bertonnx.runtime.core.errors import CheckFailed
from bertonnx.runtime.core.families import ort_model_type

from . import attention_bias, rotary_attention
from .graph import op_counts

# The op types whose counts the manifest records (fused ones and the quantized forms).
FUSED_OPS = ("EmbedLayerNormalization", "QEmbedLayerNormalization", "Attention", "QAttention",
             "MultiHeadAttention", "RotaryEmbedding", "SkipLayerNormalization", "BiasGelu",
             "FastGelu", "Gelu", "LayerNormalization", "DynamicQuantizeMatMul", "MatMulInteger",
             "DynamicQuantizeLinear")


def fused_counts(proto: onnx.ModelProto) -> dict[str, int]:
    counts = op_counts(proto)
    return {op: counts[op] for op in FUSED_OPS if counts.get(op)}


def attention_count(counts: dict[str, int]) -> int:
    return sum(counts.get(op, 0) for op in ("Attention", "QAttention", "MultiHeadAttention"))


def layer_applications(c: BertConfig) -> int:
    """Encoder layers the graph runs: ALBERT runs a group of inner_group_num layers at each of
    num_hidden_layers depths (the other families have inner_group_num 1)."""
    return c.num_hidden_layers * c.inner_group_num


def fuse(path: Path, num_heads: int, hidden_size: int, scratch: Path | None = None, *,
         lean: bool = False, model_type: str | None = None,
         config: BertConfig | None = None) -> onnx.ModelProto:
    """The fused graph of the model at `path` (not written; the caller saves it), with the
    optimizer's patterns for config.json's `model_type` (a family's row; BERT's when unknown).

    Default (graphs made elsewhere, export/adopt.py): `optimize_model(opt_level=1)` in two
    steps, so its intermediate graph (as large as the model) goes to `scratch` — the export's
    own folder, which a later export cleans up after a SIGKILL — rather than an unnamed folder
    in /tmp that nothing removes.

    `lean` (graph.export_onnx's own graph, constant-folded by the exporter): the Python fusions
    alone, without onnxruntime's basic pass and without symbolic shape inference. Both copy the
    whole model several times (the pass loads it into a session and saves it again; each
    shape inference copies the proto, then serialises and parses it): on a bert-base-shaped
    fill-mask model (438 MB) they took the fusion step from 1.3 GB to 4.2 GB of RSS and from
    3 s to 24 s. Measured on every family × task: the same fused-op counts either way; what
    the lean graph keeps is a few Constant and Shape nodes the basic pass would fold, which
    onnxruntime folds when it loads the graph.

    `config` (the export's own model): ModernBERT's attention is fused by export/
    rotary_attention.py, on the exporter's graph, before the optimizer."""
    # lazy: onnxruntime.transformers appends its folder to sys.path and loads ~60 top-level
    # modules (0.2 s); api.py imports this module for every export and parity check
    from onnxruntime.transformers.fusion_options import FusionOptions
    from onnxruntime.transformers.optimizer import optimize_by_fusion, optimize_by_onnxruntime

    # The optimizer logs every fusion at INFO through its own loggers; keep the CLI quiet.
    for name in ("onnxruntime.transformers", "fusion_base", "onnx_model", "onnx_model_bert"):
        logging.getLogger(name).setLevel(logging.WARNING)
    optimizer = ort_model_type(model_type)
    options = FusionOptions(optimizer)
    # the bias Add stays after its MatMul (onnxruntime folds it into the int8 MatMul at load)
    options.enable_bias_skip_layer_norm = False
    if lean:
        # its "symbolic shape inference disabled" warning is this choice, not a failure
        logging.getLogger("fusion_skiplayernorm").setLevel(logging.ERROR)
        options.enable_shape_inference = False
        proto = onnx.load(str(path))
        if config is not None and config.family.attention == "rotary":
            rotary_attention.fuse(proto, config)
        bias = attention_bias.detach(proto)  # MPNet's relative positions (see that module)
        opt = optimize_by_fusion(proto, optimizer, num_heads, hidden_size, options)
        _declare_contrib_domain(opt.model)
    else:
        with tempfile.TemporaryDirectory(prefix="bertonnx-fuse-", dir=scratch) as d:
            basic = Path(d) / "basic.onnx"
            # what optimize_model runs at opt_level 1: onnxruntime's basic graph optimisations
            # (constant folding, cast elimination), ConstantSharing off. The intermediate's
            # weights always go to a data file beside it (whatever the source did): it lives
            # in this folder only, onnx.load below reads them back in, and a graph past 2 GB
            # could not be written otherwise.
            optimize_by_onnxruntime(str(path), use_gpu=False, optimized_model_path=str(basic),
                                    opt_level=1, disabled_optimizers=["ConstantSharing"],
                                    save_as_external_data=True)
            proto = onnx.load(str(basic))
            bias = attention_bias.detach(proto)
            opt = optimize_by_fusion(proto, optimizer, num_heads, hidden_size, options)
    if bias is not None:
        attention_bias.attach(opt.model, bias)
    unfuse_residual_norms(opt.model)
    share_identical_initializers(opt.model)
    return opt.model


def unfuse_residual_norms(proto: onnx.ModelProto) -> int:
    """Each SkipLayerNormalization(x, skip, gamma, beta[, bias]) back into Add(x[ + bias],
    skip) -> LayerNormalization(gamma, beta), in place (see the module docstring for why);
    returns how many. The optimizer has to fuse them first: RoBERTa's embedding pattern (its
    GPT-2 one) matches a SkipLayerNormalization. A bias appears only in graphs fused elsewhere
    (adopt): ours keep the bias Add after its MatMul."""
    nodes, n = [], 0
    for node in proto.graph.node:
        if node.op_type != "SkipLayerNormalization":
            nodes.append(node)
            continue
        eps = next((a.f for a in node.attribute if a.name == "epsilon"), 1e-12)
        x = node.input[0]
        if len(node.input) > 4 and node.input[4]:
            x = f"{node.name}_biased"
            nodes.append(helper.make_node("Add", [node.input[0], node.input[4]], [x],
                                          name=f"{node.name}_bias"))
        total = node.output[3] if len(node.output) > 3 and node.output[3] else f"{node.name}_sum"
        nodes.append(helper.make_node("Add", [x, node.input[1]], [total],
                                      name=f"{node.name}_add"))
        nodes.append(helper.make_node("LayerNormalization", [total, *node.input[2:4]],
                                      [node.output[0]], name=f"{node.name}_norm", axis=-1,
                                      epsilon=eps))
        n += 1
    del proto.graph.node[:]
    # (LayerNormalization below opset 17: onnxruntime runs it, as the fused MLM head's)
    proto.graph.node.extend(nodes)
    return n


def unfuse_bias_gelu(proto: onnx.ModelProto) -> int:
    """Each BiasGelu(x, bias) back into Add(x, bias) -> Gelu, in place; returns how many.
    For int8 graphs: there the MatMul before it is quantized, and onnxruntime folds a following
    Add into DynamicQuantizeMatMul's bias at load, which a BiasGelu prevents — the split form
    ran the MiniLM-L6 int8 graph 2–4% faster (1 thread, AMD EPYC Zen 4; docs/int8.md). fp32
    graphs keep BiasGelu (the split measured the same there), and ALBERT's FastGelu, which
    takes its bias the same way, is left as it is: not measured."""
    nodes, n = [], 0
    for node in proto.graph.node:
        if node.op_type != "BiasGelu":
            nodes.append(node)
            continue
        base = node.name or node.output[0]
        biased = f"{base}_biased"
        nodes.append(helper.make_node("Add", list(node.input[:2]), [biased],
                                      name=f"{base}_bias"))
        nodes.append(helper.make_node("Gelu", [biased], list(node.output), name=node.name,
                                      domain="com.microsoft"))
        n += 1
    del proto.graph.node[:]
    proto.graph.node.extend(nodes)
    return n


def _declare_contrib_domain(proto: onnx.ModelProto) -> None:
    """Import com.microsoft (the fused ops' domain) when nodes use it: the basic pass's
    session wrote every domain it knows; without it, onnx's checker and shape inference
    (which the int8 quantizer runs) refuse the fused ops."""
    domains = {o.domain for o in proto.opset_import}
    if "com.microsoft" not in domains and any(n.domain == "com.microsoft"
                                              for n in proto.graph.node):
        proto.opset_import.append(onnx.helper.make_opsetid("com.microsoft", 1))


def share_identical_initializers(proto: onnx.ModelProto) -> int:
    """Point every use of a byte-identical initializer at the first one and drop the copies;
    returns how many were dropped. ALBERT's shared layers come out of attention fusion with one
    packed QKV weight per application. Exact bytes only (onnxruntime's own
    remove_duplicated_initializer also merges merely allclose tensors).

    Candidates are found by type, shape and a digest of their first and last 64 KiB, and only
    those are compared whole: hashing every byte of a bert-base graph took seconds."""
    g = proto.graph
    first: dict[tuple, list] = {}
    alias: dict[str, str] = {}
    for init in g.initializer:
        raw = init.raw_data
        if not raw:  # small constants the exporter wrote as typed fields
            continue
        key = (init.data_type, tuple(init.dims), len(raw),
               hashlib.blake2b(raw[:1 << 16] + raw[-(1 << 16):]).digest())
        same = next((t for t in first.get(key, ()) if t.raw_data == raw), None)
        if same is not None:
            alias[init.name] = same.name
        else:
            first.setdefault(key, []).append(init)
    if not alias:
        return 0
    for node in g.node:
        for i, name in enumerate(node.input):
            if name in alias:
                node.input[i] = alias[name]
    # deleted in place: re-adding the kept ones (extend) would copy every tensor into the
    # proto's arena, +600 MB held for the proto's life on bert-base
    for i in reversed([i for i, init in enumerate(g.initializer) if init.name in alias]):
        del g.initializer[i]
    return len(alias)


def check_fused(counts: dict[str, int], c: BertConfig) -> None:
    """Every family must come out fully fused: one attention per layer application, one
    embedding op (see the module docstring for how each family's graph gets there). A family
    whose row says `fully_fused` False (onnxruntime has no pattern for its attention) is not
    held to it: what does fuse (GELU, norms) is recorded in the manifest, not required."""
    if not c.family.fully_fused:
        return
    layers = layer_applications(c)
    att = attention_count(counts)
    if att != layers:
        raise CheckFailed(
            f"fusion incomplete: {att} fused attention ops for {layers} layers ({counts})",
            "the exporter or onnxruntime changed; export with --no-optimize and report it")
    emb = counts.get("EmbedLayerNormalization", 0) + counts.get("QEmbedLayerNormalization", 0)
    if emb != 1:
        raise CheckFailed(f"fusion incomplete: {emb} EmbedLayerNormalization ops ({counts})",
                          "export with --no-optimize and report it")
