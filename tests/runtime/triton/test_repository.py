"""`bertonnx export-triton`: the model repository's files, its config fields, and the config
parsed against Triton's own schema, for both kinds of model (the Python-backend pipeline model
and the onnxruntime-backend graph).

The schema check parses config.pbtxt with protobuf's text_format into `inference.ModelConfig`
from tritonclient's compiled model_config_pb2 (the generated module of
triton-inference-server/common's model_config.proto, which tritonclient ships), then applies
the rules Triton's model_config_utils checks for a batching model; for the graph it runs the
copied model.onnx with onnxruntime to prove every output's dims (batch left out) match the
config (this Triton has no onnxruntime backend). The pipeline model runs on a real Triton in
test_server.py.
"""
from __future__ import annotations

import filecmp
import importlib.util
from pathlib import Path

import numpy as np
import onnxruntime as ort
import pytest
from click.testing import CliRunner

from bertonnx.runtime.cli import cli
from bertonnx.runtime.core.contract import INPUT_NAMES, MODEL_NAME, output_names
from bertonnx.runtime.core.errors import ArtifactError, InputError
from bertonnx.runtime.core.manifest import Manifest
from bertonnx.runtime.core.tensors import HIDDEN
from bertonnx.runtime.triton.pipeline_repository import model_file, task_tensors
from bertonnx.runtime.triton.repository import TritonOptions, write_repository
from bertonnx.runtime.triton.stub import EXPORT

TASKS = ("fill-mask", "text-classification", "question-answering", "token-classification",
         "feature-extraction", "sparse-embedding")
ORT = "onnxruntime"
LABELS = 3  # the "classify" export's labels; fixed output dims are checked against it
NER_LABELS = 5  # the "ner" export's BIO tags


def _model_config_pb2():
    """tritonclient's generated model_config_pb2, loaded from its file.

    `import tritonclient.grpc.model_config_pb2` would run tritonclient/grpc/__init__.py, which
    needs grpcio; the generated module itself needs only protobuf.
    """
    spec = importlib.util.find_spec("tritonclient")
    if spec is None:
        pytest.skip("tritonclient is not installed (pip install -e .[test])")
    path = Path(spec.submodule_search_locations[0]) / "grpc" / "model_config_pb2.py"
    mod_spec = importlib.util.spec_from_file_location("triton_model_config_pb2", path)
    module = importlib.util.module_from_spec(mod_spec)
    mod_spec.loader.exec_module(module)
    return module


@pytest.fixture(scope="module")
def pb2():
    return _model_config_pb2()


def parse_config(pb2, text: str):
    from google.protobuf import text_format

    return text_format.Parse(text, pb2.ModelConfig())


def triton_rules(pb2, cfg) -> list[str]:
    """What Triton's ValidateModelConfig / ValidateIOShape reject for a batching ONNX model."""
    problems = []
    if not cfg.name:
        problems.append("no name")
    if cfg.backend not in ("onnxruntime", "python") and cfg.platform != "onnxruntime_onnx":
        problems.append(f"backend {cfg.backend!r} / platform {cfg.platform!r}")
    if cfg.max_batch_size <= 0 and cfg.HasField("dynamic_batching"):
        problems.append("dynamic batching needs max_batch_size > 0")
    for io in list(cfg.input) + list(cfg.output):
        if not io.name:
            problems.append("unnamed tensor")
        if io.data_type == pb2.TYPE_INVALID:
            problems.append(f"{io.name}: no data_type")
        if not io.dims:
            problems.append(f"{io.name}: no dims")
        if any(d < -1 or d == 0 for d in io.dims):
            problems.append(f"{io.name}: dims {list(io.dims)}")
    for kind in ("input", "output"):
        names = [t.name for t in getattr(cfg, kind)]
        if len(set(names)) != len(names):
            problems.append(f"duplicate {kind} names {names}")
    for group in cfg.instance_group:
        if group.count < 1:
            problems.append(f"instance count {group.count}")
    return problems


@pytest.mark.parametrize("task", TASKS)
def test_repository_files_and_config_fields(tiny_export, pb2, tmp_path, task):
    repo = tmp_path / "repo"
    target = write_repository(tiny_export(task), repo, TritonOptions(
        name=f"bert-{task}", max_batch_size=16, instances=2, max_wait_ms=2.5, backend=ORT))
    assert target == repo / f"bert-{task}"
    data = MODEL_NAME + ".data"  # the weights beside the graph, as export writes them
    assert sorted(p.relative_to(target).as_posix() for p in target.rglob("*")) == \
        ["1", f"1/{MODEL_NAME}", f"1/{data}", "config.pbtxt"]
    for name in (MODEL_NAME, data):
        assert filecmp.cmp(target / "1" / name, tiny_export(task) / name, shallow=False)
    assert not [p for p in repo.iterdir() if p.name.startswith(".")], "temp folder left behind"

    cfg = parse_config(pb2, (target / "config.pbtxt").read_text())
    assert triton_rules(pb2, cfg) == []
    assert cfg.name == f"bert-{task}"
    assert cfg.backend == "onnxruntime"
    assert cfg.max_batch_size == 16
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 2500
    assert [(g.count, g.kind) for g in cfg.instance_group] == [(2, pb2.ModelInstanceGroup.KIND_CPU)]
    # Inputs: the contract's names, int64, one dynamic (sequence) dim after the batch axis.
    graph_inputs = [i.name for i in ort.InferenceSession(str(target / "1" / MODEL_NAME)).get_inputs()]
    assert [i.name for i in cfg.input] == graph_inputs
    assert set(graph_inputs) <= set(INPUT_NAMES) and "input_ids" in graph_inputs
    for i in cfg.input:
        assert i.data_type == pb2.TYPE_INT64 and list(i.dims) == [-1]
    expected_dims = {
        "fill-mask": {"logits": [-1, _vocab_size(tiny_export(task))]},
        "text-classification": {"logits": [LABELS]},
        "token-classification": {"logits": [-1, NER_LABELS]},
        "question-answering": {"start_logits": [-1], "end_logits": [-1]},
        "feature-extraction": {"last_hidden_state": [-1, 32]},
        "sparse-embedding": {"sparse_embedding": [_vocab_size(tiny_export(task))]},  # pooled
    }[task]
    assert [o.name for o in cfg.output] == list(output_names(task))
    assert {o.name: list(o.dims) for o in cfg.output} == expected_dims
    assert all(o.data_type == pb2.TYPE_FP32 for o in cfg.output)


def _vocab_size(export: Path) -> int:
    return sum(1 for _ in open(export / "vocab.txt", encoding="utf-8"))


@pytest.mark.parametrize("task", TASKS)
def test_config_dims_match_what_the_model_returns(tiny_export, pb2, tmp_path, task):
    """Run the repository's model.onnx at batch 3 × sequence 7: every output is [3, *dims]."""
    target = write_repository(tiny_export(task), tmp_path / "repo", TritonOptions(backend=ORT))
    cfg = parse_config(pb2, (target / "config.pbtxt").read_text())
    session = ort.InferenceSession(str(target / "1" / MODEL_NAME))
    B, T = 3, 7
    rng = np.random.default_rng(0)
    feeds = {i.name: (rng.integers(5, 50, (B, T)) if i.name == "input_ids" else
                      np.ones((B, T)) if i.name == "attention_mask" else np.zeros((B, T))
                      ).astype(np.int64) for i in cfg.input}
    outs = session.run([o.name for o in cfg.output], feeds)
    for o, value in zip(cfg.output, outs):
        want = [B] + [T if d == -1 else d for d in o.dims]
        assert list(value.shape) == want, o.name


def test_schema_check_can_fail(tiny_export, pb2, tmp_path):
    """The parse rejects what Triton would: an unknown field, an unknown type enum."""
    from google.protobuf import text_format

    text = (write_repository(tiny_export("text-classification"), tmp_path / "r",
                             TritonOptions(backend=ORT)) / "config.pbtxt").read_text()
    with pytest.raises(text_format.ParseError):
        parse_config(pb2, text.replace("TYPE_INT64", "TYPE_INT65", 1))
    with pytest.raises(text_format.ParseError):
        parse_config(pb2, text + "max_batch: 3\n")
    broken = parse_config(pb2, text.replace("dims: [ -1 ]", "dims: [ 0 ]", 1))
    assert triton_rules(pb2, broken) == ["input_ids: dims [0]"]


def test_existing_target_needs_force(tiny_export, tmp_path):
    repo = tmp_path / "repo"
    write_repository(tiny_export("fill-mask"), repo, TritonOptions(name="m", max_batch_size=8))
    with pytest.raises(InputError, match="already exists"):
        write_repository(tiny_export("fill-mask"), repo, TritonOptions(name="m"))
    write_repository(tiny_export("question-answering"), repo, TritonOptions(name="m", force=True))
    assert '"context"' in (repo / "m" / "config.pbtxt").read_text()
    assert sorted(p.name for p in repo.iterdir()) == ["m"]


@pytest.mark.parametrize("opts, message", [
    (TritonOptions(name="has space"), "not a valid Triton model name"),
    (TritonOptions(max_batch_size=0), "max batch size"),
    (TritonOptions(instances=0), "instances"),
    (TritonOptions(backend="tensorrt"), "unknown Triton backend"),
])
def test_bad_options_are_input_errors(tiny_export, tmp_path, opts, message):
    with pytest.raises(InputError, match=message):
        write_repository(tiny_export("fill-mask"), tmp_path / "repo", opts)
    assert not (tmp_path / "repo").exists() or not any((tmp_path / "repo").iterdir())


def test_not_an_export(tmp_path):
    with pytest.raises(ArtifactError, match="does not exist"):
        write_repository(tmp_path / "nope", tmp_path / "repo")


def test_cli(tiny_export, tmp_path):
    runner = CliRunner()
    repo = tmp_path / "repo"
    res = runner.invoke(cli, ["export-triton", str(tiny_export("token-classification")),
                              "--repository", str(repo), "--name", "ner", "--max-batch-size",
                              "4", "--instances", "3", "--kind", "gpu"])
    assert res.exit_code == 0, res.output
    assert res.output.strip() == str(repo / "ner")
    text = (repo / "ner" / "config.pbtxt").read_text()
    assert "max_batch_size: 4" in text and "count: 3" in text and "KIND_GPU" in text
    assert 'backend: "python"' in text and 'string_value: "cuda,cpu"' in text
    res = runner.invoke(cli, ["export-triton", str(tiny_export("token-classification")),
                              "--repository", str(repo), "--name", "ner-graph", "--backend",
                              "onnxruntime"])
    assert res.exit_code == 0, res.output
    assert (repo / "ner-graph" / "1" / MODEL_NAME).is_file()
    res = runner.invoke(cli, ["export-triton", str(tiny_export("token-classification")),
                              "--repository", str(repo), "--backend", "onnxruntime",
                              "--threads", "2"])
    assert res.exit_code == 2 and "--threads needs --backend python" in res.output


def test_cli_error_is_one_line(tmp_path, capsys):
    from bertonnx.runtime.cli import main

    code = main(["export-triton", str(tmp_path / "missing"), "--repository", str(tmp_path)])
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("bertonnx: error:") and "Traceback" not in err


# -- the pipeline model (Python backend) --------------------------------------------------------

@pytest.mark.parametrize("task", TASKS)
def test_pipeline_model_files_and_config(tiny_export, pb2, tmp_path, task):
    """REPO/NAME holds config.pbtxt, the package's own model.py and a verified copy of the
    export; the config declares the pipeline's /v2 tensors ([N] as dims [1] reshaped to [])."""
    repo = tmp_path / "repo"
    target = write_repository(tiny_export(task), repo, TritonOptions(
        name="m", max_batch_size=8, instances=2, max_wait_ms=1.5, threads=1))
    assert (target / "1" / "model.py").read_text() == model_file()
    assert "class TritonPythonModel" in model_file()
    copied = target / "1" / EXPORT
    assert not copied.is_symlink()
    assert Manifest.read(copied, verify=True).task == task   # every file, sha256-checked
    assert not [p for p in repo.iterdir() if p.name.startswith(".")], "temp folder left behind"

    cfg = parse_config(pb2, (target / "config.pbtxt").read_text())
    assert triton_rules(pb2, cfg) == []
    assert (cfg.backend, cfg.max_batch_size) == ("python", 8)
    assert cfg.dynamic_batching.max_queue_delay_microseconds == 1500
    assert [(g.count, g.kind) for g in cfg.instance_group] == [(2, pb2.ModelInstanceGroup.KIND_CPU)]
    assert cfg.parameters["threads"].string_value == "1"
    spec = task_tensors(task)
    types = {"BYTES": pb2.TYPE_STRING, "FP32": pb2.TYPE_FP32, "INT64": pb2.TYPE_INT64}
    for declared, got in ((spec.inputs, cfg.input), (spec.outputs, cfg.output)):
        assert [t.name for t in got] == [t.name for t in declared]
        for t, io in zip(declared, got):
            assert io.data_type == types[t.datatype]
            want = [32 if d == HIDDEN else d for d in t.shape[1:]]   # the tiny hidden size
            if want:
                assert list(io.dims) == want and not io.HasField("reshape")
            else:
                assert list(io.dims) == [1] and list(io.reshape.shape) == []
    assert [i.optional for i in cfg.input] == [t.optional for t in spec.inputs]


def test_pipeline_model_can_link_the_export(tiny_export, tmp_path):
    target = write_repository(tiny_export("fill-mask"), tmp_path / "repo",
                              TritonOptions(link=True))
    link = target / "1" / EXPORT
    assert link.is_symlink() and link.resolve() == tiny_export("fill-mask").resolve()
