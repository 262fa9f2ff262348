"""torch -> ONNX: the pinned exporter call, sample inputs, and the graph's parameter bytes.

The exporter is pinned to TorchScript (`dynamo=False`): measured with torch 2.13 and onnxruntime
1.31, its graph is the one onnxruntime's BERT optimizer fuses fully (Attention == layers), while
the dynamo exporter's attention does not fuse at all (measured; tests/export check the counts).
"""
from __future__ import annotations

import warnings
from pathlib import Path

import onnx
import torch

from bertonnx.build import Bert
from bertonnx.runtime.core.contract import dynamic_axes, graph_inputs, output_names
from bertonnx.runtime.core.errors import CheckFailed

EXPORTER = "torch.onnx.export(dynamo=False)"
EXPORT_BATCH = 2  # >= 2, so batch cannot be specialised to 1


def input_names(model: Bert) -> tuple[str, ...]:
    """The graph's inputs (the contract's, less token_type_ids where the model has one type)."""
    return graph_inputs(model.config.type_vocab_size)


def export_seq_len(model: Bert) -> int:
    """A sequence length equal to no other dimension of the model, so no Reshape bakes it in."""
    c = model.config
    taken = {EXPORT_BATCH, c.num_attention_heads, c.head_dim, c.hidden_size, c.intermediate_size,
             c.vocab_size, c.num_hidden_layers, c.num_labels, c.type_vocab_size,
             c.max_position_embeddings, c.embedding_dim, c.max_tokens, 1}
    for t in (11, 13, 17, 19, 23, 29, 31, 37):
        if t not in taken and t <= c.max_tokens:
            return t
    # Tiny position tables: anything free that fits (RoBERTa: past the padding offset).
    for t in range(c.max_tokens, 1, -1):
        if t not in taken:
            return t
    raise CheckFailed(f"no free sequence length to export with ({c.max_tokens} positions)",
                      "use a model with more positions")


def sample_inputs(model: Bert, batch: int, seq: int, *, lengths=None, seed: int = 0):
    """Right-padded int64 (input_ids, attention_mask, token_type_ids) of shape (batch, seq).

    Row lengths are random in [1, seq] (one row always full); token types switch to 1 in the
    second half of each row, as for a text pair, so the segment embedding is exercised.
    """
    c = model.config
    g = torch.Generator().manual_seed(seed)
    if lengths is None:
        lengths = torch.randint(1, seq + 1, (batch,), generator=g)
        lengths[0] = seq
    lengths = torch.as_tensor(lengths)
    pos = torch.arange(seq)[None]  # (1, T)
    mask = (pos < lengths[:, None]).long()  # (B, T), right padding
    low = min(c.pad_token_id + 1, c.vocab_size - 1)
    ids = torch.randint(low, c.vocab_size, (batch, seq), generator=g)
    ids = torch.where(mask.bool(), ids, torch.full_like(ids, c.pad_token_id))
    second = (pos >= (lengths[:, None] + 1) // 2) & mask.bool()
    tt = second.long() if c.type_vocab_size > 1 else torch.zeros_like(ids)
    return ids, mask, tt


def export_onnx(model: Bert, path: Path, opset: int) -> None:
    """Write the unoptimised fp32 graph: named int64 inputs, batch/sequence dynamic everywhere.

    Only `input_names(model)` are traced: without token_type_ids the model makes its zeros
    inside the graph, which onnxruntime's EmbedLayerNormalization fusion still takes."""
    model = model.eval()
    names = input_names(model)
    args = sample_inputs(model, EXPORT_BATCH, export_seq_len(model))[:len(names)]
    with warnings.catch_warnings(), torch.no_grad():
        # The TorchScript exporter warns that it is deprecated; the choice is deliberate (above)
        # and guarded by the fusion check, so the warning only adds noise to the CLI.
        warnings.simplefilter("ignore")
        torch.onnx.export(model, args, str(path), input_names=list(names),
                          output_names=list(output_names(model.task)),
                          dynamic_axes=dynamic_axes(model.task, names), opset_version=opset,
                          do_constant_folding=True, dynamo=False)


def save_model(proto: onnx.ModelProto, path: Path) -> None:
    """The graph at `path` (model.onnx) and its weights beside it in one external data file
    (model.onnx.data; tensors under 1 KiB stay in the graph). onnxruntime maps that file
    rather than copying it into the session, and lets go of each weight it has laid out for
    its GEMMs: a bert-base classifier's cold process holds 390 MiB for 417 MiB of weights, 653
    MiB when the weights are inside model.onnx (docs/benchmarks-history.md, serving memory).
    Past
    protobuf's 2 GB a single file is impossible anyway.

    onnx moves the tensors' bytes to the file: `proto` keeps its graph but not its weights."""
    data = path.with_name(path.name + ".data")
    data.unlink(missing_ok=True)  # onnx appends to an existing data file
    onnx.save_model(proto, str(path), save_as_external_data=True, all_tensors_to_one_file=True,
                    location=data.name, size_threshold=1024)
    # onnx creates the data file owner-only (0600); the graph beside it got the umask's mode.
    # Give the weights the graph's: another user (a Triton container, a system-wide install)
    # that can read model.onnx must be able to read its weights.
    if data.is_file():
        data.chmod(path.stat().st_mode & 0o777)


# What stays in the graph: tensors under 64 KiB (shape constants, position ranges) and vectors
# (biases, norms), whose values symbolic shape inference may read; matrices go to the file.
_INLINE_BYTES = 1 << 16


def without_weights(proto: onnx.ModelProto, data: Path) -> onnx.ModelProto:
    """A copy of `proto` whose weight matrices are external data in `data` (written here, one
    tensor at a time); `proto` itself is not changed."""
    light = onnx.ModelProto()
    for field in ("ir_version", "producer_name", "producer_version", "domain", "model_version",
                  "doc_string"):
        setattr(light, field, getattr(proto, field))
    light.opset_import.extend(proto.opset_import)
    light.metadata_props.extend(proto.metadata_props)
    g, lg = proto.graph, light.graph
    lg.name = g.name
    for field in ("node", "input", "output", "value_info"):
        getattr(lg, field).extend(getattr(g, field))
    with open(data, "wb") as f:
        for init in g.initializer:
            if len(init.dims) < 2 or len(init.raw_data) < _INLINE_BYTES:
                lg.initializer.append(init)
                continue
            t = lg.initializer.add(name=init.name, data_type=init.data_type, dims=init.dims,
                                   data_location=onnx.TensorProto.EXTERNAL)
            offset = f.tell()
            f.write(init.raw_data)
            for key, value in (("location", data.name), ("offset", offset),
                               ("length", f.tell() - offset)):
                t.external_data.add(key=key, value=str(value))
    return light


def _fits_bytesize(proto: onnx.ModelProto) -> bool:
    try:
        proto.ByteSize()
        return True
    except Exception:  # protobuf refuses to size messages past 2 GB
        return False


def unique_param_bytes(model: Bert) -> int:
    """Bytes of the model's parameters, each shared tensor counted once (tied weights)."""
    seen, total = set(), 0
    for p in model.parameters():  # parameters() already yields a shared tensor once
        if p.data_ptr() not in seen:
            seen.add(p.data_ptr())
            total += p.numel() * p.element_size()
    return total


def graph_bytes(path: Path) -> int:
    """model.onnx plus its external data file, if any."""
    data = path.with_name(path.name + ".data")
    return path.stat().st_size + (data.stat().st_size if data.is_file() else 0)


def op_counts(proto: onnx.ModelProto) -> dict[str, int]:
    counts: dict[str, int] = {}
    for node in proto.graph.node:
        counts[node.op_type] = counts.get(node.op_type, 0) + 1
    return counts
