"""The product as users get it: an sdist and a wheel built from this tree, the wheel installed
non-editable into a clean venv without torch, and the inference CLI run there.

An editable install hides packaging mistakes (a module that only imports by accident, a data
file left out of the wheel, a command that needs an extra); this test is the one that sees them.
"""
from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import tarfile
import zipfile
from pathlib import Path

import numpy as np
import pytest

from bertonnx.runtime import load
from bertonnx.runtime.cli import COMMANDS
from bertonnx.runtime.core import engines
from bertonnx.runtime.core.engines import choose

from tests.conftest import CLS, EMB, FM, NER, QA, family_spec
from tests.runtime._compare import assert_same

ROOT = Path(__file__).resolve().parents[2]
# what a clean clone holds that the build does not need (or that a dev tree adds)
SKIP = shutil.ignore_patterns(".git", ".venv", "runs", "artifacts", ".setuptools-build",
                              "*.egg-info", "__pycache__", ".pytest_cache", "dist", ".bench")

pytestmark = pytest.mark.slow


def _env() -> dict[str, str]:
    """The caller's environment without what points Python at this checkout."""
    return {k: v for k, v in os.environ.items() if k not in ("PYTHONPATH", "VIRTUAL_ENV")}


def _run(argv, **kw) -> subprocess.CompletedProcess:
    return subprocess.run([str(a) for a in argv], capture_output=True, text=True, env=_env(),
                          timeout=kw.pop("timeout", 600), **kw)


@pytest.fixture(scope="module")
def user_venv(tmp_path_factory):
    """(venv bin folder, built files): the sdist, the wheel built from it, the wheel installed.

    The sdist takes most of the time (gzip at level 9 over the bundled model's 91 MB), so the
    same wheel is built from the tree and installed meanwhile, on the other core; the sdist's
    wheel must then hold exactly the files of the installed one."""
    tmp = tmp_path_factory.mktemp("install")
    src, dist, venv = tmp / "src", tmp / "dist", tmp / "venv"
    shutil.copytree(ROOT, src, ignore=SKIP)
    # run from `tmp`: in the source tree `-m build` would import our build/ folder
    sdist = subprocess.Popen([sys.executable, "-m", "build", "--no-isolation", "--sdist",
                              "--outdir", str(dist), str(src)], cwd=tmp, env=_env(),
                             stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        built = _run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir",
                      tmp / "tree", src], cwd=tmp)
        assert built.returncode == 0, built.stderr[-3000:]
        wheel = next((tmp / "tree").glob("*.whl"))
        made = _run([sys.executable, "-m", "venv", venv], cwd=tmp)
        assert made.returncode == 0, made.stderr
        pip = _run([venv / "bin" / "python", "-m", "pip", "install", "--quiet", wheel], cwd=tmp)
        assert pip.returncode == 0, pip.stderr[-3000:]
        _, err = sdist.communicate(timeout=600)
    finally:
        sdist.kill()
    assert sdist.returncode == 0, err[-3000:]
    unpacked = tmp / "unpacked"
    with tarfile.open(next(dist.glob("*.tar.gz"))) as tar:
        tar.extractall(unpacked, filter="data")
    from_sdist = _run([sys.executable, "-m", "build", "--no-isolation", "--wheel", "--outdir",
                       dist, next(unpacked.iterdir())], cwd=tmp)
    assert from_sdist.returncode == 0, from_sdist.stderr[-3000:]
    with zipfile.ZipFile(wheel) as a, zipfile.ZipFile(next(dist.glob("*.whl"))) as b:
        assert sorted(a.namelist()) == sorted(b.namelist())
    return venv / "bin", sorted(p.name for p in dist.iterdir())


def test_sdist_and_wheel_are_built(user_venv):
    _, files = user_venv
    assert any(f.endswith(".tar.gz") for f in files) and any(f.endswith(".whl") for f in files)


def test_the_base_install_has_no_torch(user_venv):
    bin_, _ = user_venv
    probe = _run([bin_ / "python", "-c", "import importlib.util as u; "
                  "print([m for m in ('torch', 'onnx', 'transformers', 'starlette') "
                  "if u.find_spec(m)])"], cwd=bin_)
    assert probe.stdout.strip() == "[]", probe.stdout + probe.stderr


def test_fill_mask_default_from_the_wheel(user_venv):
    bin_, _ = user_venv
    r = _run([bin_ / "bertonnx", "fill-mask", "default", "Paris is the [MASK] of France.",
              "--json"], cwd=bin_)
    assert r.returncode == 0, r.stderr
    answers = json.loads(r.stdout)
    assert len(answers) == 5 and all({"score", "token_str", "sequence"} <= set(a) for a in answers)


def test_classify_an_export_made_by_the_full_install(user_venv, tiny_export, ours):
    bin_, _ = user_venv
    r = _run([bin_ / "bertonnx", "classify", tiny_export("text-classification"), "the cat", "a dog",
              "--top-k", "all", "--json"], cwd=bin_)
    assert r.returncode == 0, r.stderr
    expected = ours("text-classification")(["the cat", "a dog"], top_k=None)
    got = json.loads(r.stdout)
    assert [[x["label"] for x in row] for row in got] == \
        [[x["label"] for x in row] for row in expected]
    assert max(abs(a["score"] - b["score"]) for g, e in zip(got, expected)
               for a, b in zip(g, e)) < 1e-6


@pytest.mark.parametrize("argv, extra", [
    (["serve", "default"], "serve"),
    (["serve", "--help"], "serve"),
    (["export", "default", "--task", "fill-mask", "--out", "x"], "torch"),
    (["finetune", "default"], "torch"),
])
def test_commands_of_missing_extras_name_the_extra(user_venv, argv, extra):
    bin_, _ = user_venv
    r = _run([bin_ / "bertonnx", *argv], cwd=bin_)
    assert r.returncode == 2
    cmd = argv[0]
    assert r.stderr.strip() == (f"bertonnx: error: {cmd} needs the {extra} extra — "
                                f"pip install 'bertonnx[{extra}]'"), r.stderr


def test_help_lists_every_command(user_venv):
    bin_, _ = user_venv
    r = _run([bin_ / "bertonnx", "--help"], cwd=bin_)
    assert r.returncode == 0, r.stderr
    for name in COMMANDS:
        assert f"  {name} " in r.stdout
    assert "pip install 'bertonnx[serve]'" in r.stdout  # the listing says what is missing


def test_bench_from_the_wheel_without_torch(user_venv, tmp_path):
    """bertonnx.bench is in the wheel, and `bertonnx bench` on an export needs no torch."""
    bin_, _ = user_venv
    texts = tmp_path / "texts.txt"
    texts.write_text("Paris is a city in France.\nThe cat sat on the mat.\n", encoding="utf-8")
    r = _run([bin_ / "bertonnx", "bench", "default", "--quick", "--no-cold-start",
              "--texts", texts, "--json"], cwd=bin_)
    assert r.returncode == 0, r.stderr[-2000:]
    assert list(json.loads(r.stdout)["end_to_end"]) == ["bertonnx fp32 fused"]  # no openvino extra there


def _wheel_json(bin_, *argv):
    """`bertonnx ARGV --json` run by the installed wheel, its answer parsed."""
    r = _run([bin_ / "bertonnx", *argv, "--json"], cwd=bin_)
    assert r.returncode == 0, r.stderr[-2000:]
    return json.loads(r.stdout)


@pytest.fixture(scope="module")
def prompted_embedder(tmp_path_factory, tiny_checkpoint):
    """An export of a sentence-transformers 5 folder with prompts, made by the full install."""
    # sentence-transformers (torch) builds the folder: only this fixture needs it
    from bertonnx.export import ExportOptions, export_model
    from tests.runtime.core.pipelines._st_folders import save_v5

    root = tmp_path_factory.mktemp("prompted")
    folder = save_v5(tiny_checkpoint("feature-extraction"), root / "st", "mean", normalize=True,
                     prompts={"query": "the cat "}, default_prompt_name=None)
    export_model(folder, "feature-extraction", root / "out", ExportOptions(parity=False))
    return root / "out"


def test_retrieval_commands_from_the_wheel(user_venv, tiny_export, ours, prompted_embedder):
    """rerank, embed-sparse, zero-shot and embed --prompt-name, run by the torch-free install
    on exports the full one made, answer what the checkout's library answers."""
    bin_, _ = user_venv
    docs = ["the dog ran to the river", "a cat sat on the mat", "paris is a city"]
    assert_same(_wheel_json(bin_, "rerank", tiny_export("text-ranking"), "--query", "the cat",
                            *docs), ours("text-ranking")("the cat", docs))
    texts = ["the cat sat on the mat", "london music"]
    assert_same(_wheel_json(bin_, "embed-sparse", tiny_export("sparse-embedding"), *texts,
                            "--top-k", "5"), ours("sparse-embedding")(texts, top_k=5))
    assert_same(_wheel_json(bin_, "zero-shot", tiny_export("zero-shot-classification"), *texts,
                            "--candidate-labels", "music,city"),
                ours("zero-shot-classification")(texts, candidate_labels=["music", "city"]))
    embed = load(prompted_embedder)
    got = _wheel_json(bin_, "embed", prompted_embedder, texts[1], "--prompt-name", "query")
    assert_same(got, embed(texts[1], prompt_name="query"))
    assert max(abs(a - b) for a, b in zip(got, embed(texts[1]))) > 1e-3   # the prompt counted
    # issue 42: Matryoshka cuts, windows of a text past the model, ColBERT token vectors
    long = " ".join(["the cat sat on the mat"] * 20)
    assert_same(_wheel_json(bin_, "embed", prompted_embedder, long, "--dimensions", "8",
                            "--long-inputs", "chunk"),
                embed(long, dimensions=8, long_inputs="chunk"))
    colbert = tiny_export("multi-vector")
    assert_same(_wheel_json(bin_, "embed-multi", colbert, *texts, "--is-query"),
                [v.tolist() for v in load(colbert)(texts, is_query=True)])
    m3 = tiny_export("bge-m3")   # dense, lexical weights and colbert vectors from one pass
    want = [{k: v.tolist() if isinstance(v, np.ndarray) else v for k, v in r.items()}
            for r in load(m3)(texts)]
    assert_same(_wheel_json(bin_, "embed-m3", m3, *texts), want)


def test_the_serve_extra_brings_the_docs_page_assets(user_venv):
    """/docs serves Swagger UI from swagger-ui-bundle-v2 (no CDN): the serve extra names it."""
    bin_, _ = user_venv
    r = _run([bin_ / "python", "-c", "from importlib.metadata import requires; "
              "print('\\n'.join(requires('bertonnx')))"], cwd=bin_)
    serve = [line for line in r.stdout.splitlines() if 'extra == "serve"' in line]
    assert any(line.startswith("swagger-ui-bundle-v2") for line in serve), r.stdout + r.stderr


@pytest.mark.parametrize("model_type", ["mpnet", "deberta-v2", "modernbert"])
def test_the_2020s_families_from_the_wheel(user_venv, tiny_export, model_type):
    """Each head of MPNet, DeBERTa-v2 and ModernBERT, exported by the full install and run by
    the torch-free one's CLI, answers what the checkout's library answers on the same folder
    (the family's own tokenizer: BPE with `<mask>`, SentencePiece Unigram with `[MASK]`)."""
    bin_, _ = user_venv
    texts = ["The cat sat on the mat.", "naïve café in Zürich"]
    folders = {task: tiny_export(family_spec(model_type, task), parity=True)
               for task in (FM, CLS, NER, QA, EMB)}
    pipes = {task: load(folder) for task, folder in folders.items()}
    text = f"Paris is the {pipes[FM].tokenizer.mask_token} of France."
    assert_same(_wheel_json(bin_, "fill-mask", folders[FM], text, "--top-k", "5"),
                pipes[FM](text, top_k=5))
    assert_same(_wheel_json(bin_, "classify", folders[CLS], *texts, "--top-k", "all"),
                pipes[CLS](texts, top_k=None))
    assert_same(_wheel_json(bin_, "tokens", folders[NER], *texts, "--aggregation-strategy",
                            "simple", "--ignore-labels", ""),
                pipes[NER](texts, aggregation_strategy="simple", ignore_labels=[]))
    question, context = "Where did the cat sit?", "The cat sat on the mat by the river."
    assert_same(_wheel_json(bin_, "qa", folders[QA], "-q", question, "-c", context,
                            "--top-k", "2"),
                pipes[QA](question=question, context=context, top_k=2))
    assert_same(_wheel_json(bin_, "embed", folders[EMB], *texts), pipes[EMB](texts))


def test_the_openvino_extra_from_the_wheel(user_venv, tiny_export):
    """Last in this module (it adds the extra to the user's venv, which the tests above see
    without it): without the extra `--providers openvino` is one line naming it; with it, the
    torch-free install runs the export on OpenVINO f32 with the checkout's CPU answers (through
    onnxruntime's plugin on Intel CPUs, OpenVINO's own runtime elsewhere; on a CPU OpenVINO
    offers no device for, the one line saying so), and `auto` picks what the export proved for
    this CPU."""
    bin_, _ = user_venv
    folder = tiny_export(EMB, parity=True)
    texts = ["the cat sat on the mat", "london music"]
    r = _run([bin_ / "bertonnx", "embed", folder, *texts, "--providers", "openvino"], cwd=bin_)
    assert r.returncode == 2
    assert r.stderr.strip() == ("bertonnx: error: the openvino engine needs the openvino extra "
                                "— pip install 'bertonnx[openvino]'"), r.stderr
    wheel = next((bin_.parents[1] / "dist").glob("*.whl"))
    pip = _run([bin_ / "python", "-m", "pip", "install", "--quiet", f"{wheel}[openvino]"],
               cwd=bin_)
    assert pip.returncode == 0, pip.stderr[-3000:]
    want = load(folder, providers="cpu")(texts)
    if (why := engines.unavailable("openvino")):  # a CPU OpenVINO takes no device of: one line
        r = _run([bin_ / "bertonnx", "embed", folder, *texts, "--providers", "openvino:f32"],
                 cwd=bin_)
        assert (r.returncode, r.stderr.strip()) == (2, f"bertonnx: error: {why}")
    else:
        assert_same(_wheel_json(bin_, "embed", folder, *texts, "--providers", "openvino:f32"),
                    want)
    env = {k: v for k, v in os.environ.items()
           if k not in ("PYTHONPATH", "VIRTUAL_ENV", "BERTONNX_PROVIDERS")}
    auto = subprocess.run([str(bin_ / "python"), "-c",
                           "import sys; from bertonnx.runtime import load; "
                           "p = load(sys.argv[1]); c = p.session.config; "
                           "print(c.engine, c.precision)", str(folder)],
                          capture_output=True, text=True, env=env, timeout=300)
    assert auto.returncode == 0, auto.stderr[-2000:]
    record = load(folder).folder.manifest.engines
    expected = choose("auto", quantization="none", engines=record).key.replace(":", " ")
    assert auto.stdout.strip() == expected
