"""`bertonnx export-triton`: the model repository's files, its config fields, and the config
parsed against Triton's own schema.

Triton cannot run here. The schema check parses config.pbtxt with protobuf's text_format into
`inference.ModelConfig` from tritonclient's compiled model_config_pb2 (the generated module of
triton-inference-server/common's model_config.proto, which tritonclient ships), then applies
the rules Triton's model_config_utils checks for a batching model; and it runs the copied
model.onnx with onnxruntime to prove every output's dims (batch left out) match the config.
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
from bertonnx.runtime.triton.repository import TritonOptions, write_repository

TASKS = ("fill-mask", "text-classification", "question-answering", "token-classification",
         "feature-extraction")
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
    if cfg.backend != "onnxruntime" and cfg.platform != "onnxruntime_onnx":
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
        name=f"bert-{task}", max_batch_size=16, instances=2, max_wait_ms=2.5))
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
    }[task]
    assert [o.name for o in cfg.output] == list(output_names(task))
    assert {o.name: list(o.dims) for o in cfg.output} == expected_dims
    assert all(o.data_type == pb2.TYPE_FP32 for o in cfg.output)


def _vocab_size(export: Path) -> int:
    return sum(1 for _ in open(export / "vocab.txt", encoding="utf-8"))


@pytest.mark.parametrize("task", TASKS)
def test_config_dims_match_what_the_model_returns(tiny_export, pb2, tmp_path, task):
    """Run the repository's model.onnx at batch 3 × sequence 7: every output is [3, *dims]."""
    target = write_repository(tiny_export(task), tmp_path / "repo")
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

    text = (write_repository(tiny_export("text-classification"), tmp_path / "r") / "config.pbtxt"
            ).read_text()
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
    assert "start_logits" in (repo / "m" / "config.pbtxt").read_text()
    assert sorted(p.name for p in repo.iterdir()) == ["m"]


@pytest.mark.parametrize("opts, message", [
    (TritonOptions(name="has space"), "not a valid Triton model name"),
    (TritonOptions(max_batch_size=0), "max batch size"),
    (TritonOptions(instances=0), "instances"),
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


def test_cli_error_is_one_line(tmp_path, capsys):
    from bertonnx.runtime.cli import main

    code = main(["export-triton", str(tmp_path / "missing"), "--repository", str(tmp_path)])
    err = capsys.readouterr().err
    assert code != 0
    assert err.count("\n") == 1 and err.startswith("bertonnx: error:") and "Traceback" not in err


def _readme_client_block() -> str:
    page = Path(__file__).resolve().parents[3] / "docs" / "triton.md"
    readme = page.read_text(encoding="utf-8")
    after = readme.split("A client tokenizes", 1)[1]
    return after.split("```python\n", 1)[1].split("```", 1)[0]


def test_readme_client_example_runs_and_matches_the_pipeline(tiny_export, tmp_path, monkeypatch,
                                                             capsys):
    """Run docs/triton.md's Triton client code with tritonclient.http swapped for onnxruntime on
    the repository's model.onnx: its printed answer equals the pipeline's."""
    import ast
    import runpy
    import sys
    import types

    from bertonnx.runtime import load

    export = tiny_export("text-classification")
    repo = tmp_path / "models"
    write_repository(export, repo, TritonOptions(name="sentiment"))

    class InferInput:
        def __init__(self, name, shape, datatype):
            assert datatype == "INT64"
            self.name, self.shape = name, list(shape)

        def set_data_from_numpy(self, array):
            assert list(array.shape) == self.shape and array.dtype == np.int64
            self.array = array

    class Client:
        def __init__(self, url):
            self.session = None

        def _session(self, model):
            return ort.InferenceSession(str(repo / model / "1" / MODEL_NAME))

        def get_model_metadata(self, model):
            return {"inputs": [{"name": i.name} for i in self._session(model).get_inputs()]}

        def infer(self, model, inputs, outputs):
            session = self._session(model)
            assert {i.name for i in inputs} == {i.name for i in session.get_inputs()}
            names = [o.name for o in outputs]
            values = session.run(names, {i.name: i.array for i in inputs})
            return types.SimpleNamespace(as_numpy=dict(zip(names, values)).__getitem__)

    fake = types.ModuleType("tritonclient.http")
    fake.InferInput, fake.InferenceServerClient = InferInput, Client
    fake.InferRequestedOutput = lambda name: types.SimpleNamespace(name=name)
    import tritonclient

    monkeypatch.setitem(sys.modules, "tritonclient.http", fake)
    monkeypatch.setattr(tritonclient, "http", fake, raising=False)

    script = tmp_path / "client.py"
    script.write_text(_readme_client_block().replace("artifacts/sentiment", str(export)))
    runpy.run_path(str(script), run_name="__main__")
    printed = ast.literal_eval(capsys.readouterr().out.strip())
    want = load(export)(["what a great film", "the service was awful"])
    assert [p["label"] for p in printed] == [w["label"] for w in want]
    np.testing.assert_allclose([p["score"] for p in printed], [w["score"] for w in want],
                               rtol=0, atol=1e-5)
