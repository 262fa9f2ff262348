"""Embeddings of an exported sentence-transformers folder equal
`SentenceTransformer(folder).encode(texts, prompt_name=..., prompt=..., normalize_embeddings=...)`
within 1e-4 (issue 27), for tiny random folders in both formats built with sentence-transformers
5.7 (tests/runtime/core/pipelines/_st_folders.py), and for the real all-MiniLM-L6-v2 (slow):

    "v5"       cls+mean pooling without the prompt's tokens, a GELU Dense layer, Normalize;
               its maximum length (20) in tokenizer_config.json; prompts, "query" by default
    "classic"  the same written as v2-v4 did: the Dense weights in pytorch_model.bin, the length
               in sentence_bert_config.json, do_lower_case on a cased tokenizer
    "plain"    mean pooling without the prompt's tokens, no Normalize, dot similarity: every
               pooling mode (and concatenations) is compared on it by the `pooling` parameter
               against sentence-transformers' own Pooling module in that mode

Texts of different lengths (one past each maximum), in batches (padding) and alone."""
from __future__ import annotations

import json
import shutil

import numpy as np
import pytest
import torch
from sentence_transformers import SentenceTransformer
from sentence_transformers.sentence_transformer.modules import Pooling

from bertonnx.build.checkpoint import infer_task
from bertonnx.export import ExportOptions, export_model
from bertonnx.export.adopt import adopt
from bertonnx.runtime import load
from bertonnx.runtime.cli import main
from bertonnx.runtime.core.contract import MANIFEST_NAME
from bertonnx.runtime.core.errors import ArtifactError, InputError
from bertonnx.runtime.core.tasks import POOLING_MODES

from bertonnx.runtime.core.contract import BF16_MIN_MEAN_COSINE

from tests.conftest import EMB, make_foreign_export
from tests.runtime._engines import BF16, EXACT, NO_BF16
from tests.runtime.core.pipelines._st_folders import save_v5, to_classic

ATOL = 1e-4
LONG = " ".join(["the cat sat on the mat with the dog in paris"] * 12)      # > 64 tokens
TEXTS = ["The Cat sat on the MAT .", "a dog", LONG, "happy music and film", "London"]
PROMPTS = {"query": "query : ", "doc": "the house ", "none": ""}


@pytest.fixture(scope="module", autouse=True)
def one_torch_thread():
    """The references run a tiny model: torch's threads only contend for the two cores (the
    module's calls took 7x longer with two)."""
    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="module")
def folders(tiny_checkpoint, tmp_path_factory):
    """name -> (sentence-transformers folder, its bertonnx export)."""
    root = tmp_path_factory.mktemp("st")
    checkpoint = tiny_checkpoint(EMB)
    v5 = save_v5(checkpoint, root / "v5", ("cls", "mean"), include_prompt=False, dense="GELU",
                 normalize=True, max_seq_length=20, prompts=PROMPTS,
                 default_prompt_name="query")
    made = {"v5": v5, "classic": to_classic(v5, root / "classic", do_lower_case=True),
            "plain": save_v5(checkpoint, root / "plain", "mean", include_prompt=False,
                             prompts=PROMPTS, similarity="dot")}
    out = {}
    for name, src in made.items():
        assert infer_task(src) == EMB          # `bertonnx export FOLDER` needs no --task
        export_model(src, EMB, root / f"{name}-onnx", ExportOptions(parity=False))
        out[name] = (src, root / f"{name}-onnx")
    return out


def close(ours, theirs) -> None:
    np.testing.assert_allclose(np.asarray(ours), theirs, rtol=0, atol=ATOL)


@pytest.mark.parametrize("engine", EXACT)
@pytest.mark.parametrize("name", ["v5", "classic"])
def test_a_folder_embeds_as_sentence_transformers_does(folders, name, engine):
    src, onnx = folders[name]
    pipe, st = load(onnx, providers=engine), SentenceTransformer(str(src), device="cpu")
    assert pipe.defaults["pooling"] == "cls+mean" and pipe.max_length == 20
    # sentence-transformers 5 gives every model a "query" and a "document" prompt
    assert pipe.dimension == 16 and pipe.prompts == {"document": "", **PROMPTS}
    for kwargs in ({}, {"prompt_name": "doc"}, {"prompt_name": "none"}, {"prompt": "a dog "},
                   {"prompt": ""}):
        want = st.encode(TEXTS, batch_size=3, **kwargs)
        close(pipe(TEXTS, return_tensors=True, batch_size=2, **kwargs), want)
        close(pipe(TEXTS[2], return_tensors=True, **kwargs), want[2])            # alone
        close(pipe(TEXTS, normalize=True, return_tensors=True, **kwargs),
              st.encode(TEXTS, normalize_embeddings=True, **kwargs))
    # normalize=False leaves its Normalize module out: the same vectors, not unit length
    raw = pipe(TEXTS, normalize=False, return_tensors=True)
    close(raw / np.linalg.norm(raw, axis=1, keepdims=True), st.encode(TEXTS))
    assert not np.allclose(np.linalg.norm(raw, axis=1), 1.0)


def test_every_pooling_mode_and_their_concatenations(folders):
    src, onnx = folders["plain"]
    pipe, st = load(onnx), SentenceTransformer(str(src), device="cpu")
    encoder = st[0]
    assert (pipe.defaults["pooling"], pipe.defaults["normalize"]) == ("mean", False)
    for kwargs in ({}, {"prompt_name": "doc"}):
        close(pipe(TEXTS, batch_size=2, **kwargs), st.encode(TEXTS, **kwargs))
    for pooling in (*POOLING_MODES, "cls+mean", "lasttoken+max+weightedmean"):
        modes = tuple(pooling.split("+"))
        ref = SentenceTransformer(modules=[encoder, Pooling(32, modes, include_prompt=False)],
                                  prompts=PROMPTS, device="cpu")
        for kwargs in ({}, {"prompt_name": "doc"}):
            close(pipe(TEXTS, pooling=pooling, normalize=False, batch_size=2, **kwargs),
                  ref.encode(TEXTS, batch_size=3, **kwargs))
    # its similarity function (dot) is the folder's, as sentence-transformers' similarity()
    a, b = pipe(TEXTS[:2], return_tensors=True), pipe(TEXTS[2:], return_tensors=True)
    assert pipe.similarity_fn_name == "dot"
    close(pipe.similarity(a, b), st.similarity(a, b).numpy())


def test_the_manifest_records_the_stack_and_the_runtime_checks_it(folders, tmp_path):
    src, onnx = folders["classic"]
    manifest = json.loads((onnx / MANIFEST_NAME).read_text())
    stack = manifest["sentence_transformers"]
    assert [m["type"] for m in stack["modules"]] == ["Pooling", "Dense", "Normalize"]
    assert (stack["format"], stack["max_seq_length"], stack["do_lower_case"]) == (
        "v2-v4", 20, True)
    # the pickled Dense weights became safetensors, hashed like every file the runtime reads
    assert stack["modules"][1]["weights"] == "2_Dense/model.safetensors"
    assert "2_Dense/model.safetensors" in manifest["files"]
    assert not any(p.suffix == ".bin" for p in onnx.rglob("*"))
    assert manifest["defaults"] == {"pooling": "cls+mean", "normalize": True}
    copy = shutil.copytree(onnx, tmp_path / "copy")
    stack["modules"][1]["activation_function"] = "Hardswish"
    (copy / MANIFEST_NAME).write_text(json.dumps(manifest))
    with pytest.raises(ArtifactError, match="records Dense activation 'Hardswish', which this "
                                            "bertonnx cannot compute — upgrade bertonnx"):
        load(copy)


def test_bad_prompt_and_pooling_arguments_are_one_line(folders, ours):
    pipe = load(folders["v5"][1])
    with pytest.raises(InputError, match=r"prompt_name must be one of 'query', 'document', "
                                         "'doc', 'none' or null, got 'passage'"):
        pipe("a", prompt_name="passage")
    with pytest.raises(InputError, match="prompt_name must be one of 'query', 'document' or "
                                         "null, got 'doc'"):
        ours(EMB)("a", prompt_name="doc")     # a plain export: sentence-transformers' two
    # the Dense layer takes the two concatenated poolings' 64 values, not one pooling's 32
    with pytest.raises(InputError, match="pooling='cls' does not fit this model: its Dense "
                                         "module takes 64-wide vectors and would get 32-wide"):
        pipe("a", pooling="cls")
    with pytest.raises(InputError, match="pooling must be one of 'cls', 'max'"):
        pipe("a", pooling="cls+median")


def test_the_command_line_takes_the_prompt(folders, capsys):
    pipe = load(folders["v5"][1])
    assert main(["embed", str(folders["v5"][1]), "a dog", "--prompt-name", "doc",
                 "--json"]) == 0
    close(json.loads(capsys.readouterr().out), pipe("a dog", prompt_name="doc"))


def test_a_folder_made_elsewhere_reads_the_same_modules(folders, tmp_path):
    """An Optimum-layout graph beside the folder's own module files: load() reads modules.json
    and the Dense module's own safetensors, `adopt` records them like an export."""
    src = folders["v5"][0]
    theirs = make_foreign_export(src, tmp_path / "optimum", EMB)
    for name in ("1_Pooling", "2_Dense", "3_Normalize"):
        if (src / name).exists():
            shutil.copytree(src / name, theirs / name)
    want = SentenceTransformer(str(src), device="cpu").encode(TEXTS, prompt_name="doc")
    close(load(theirs)(TEXTS, prompt_name="doc"), want)
    adopt(theirs, tmp_path / "adopted")
    close(load(tmp_path / "adopted")(TEXTS, prompt_name="doc"), want)


@pytest.fixture(scope="module")
def minilm_export(minilm_dir, tmp_path_factory):
    out = tmp_path_factory.mktemp("minilm") / "onnx"
    m = export_model(minilm_dir, EMB, out, ExportOptions(parity=False))
    assert m.defaults == {"normalize": True, "pooling": "mean"}     # its 2_Normalize module
    return out


@pytest.mark.slow
@pytest.mark.parametrize("engine", EXACT)
def test_minilm_embeds_as_sentence_transformers_does(minilm_dir, minilm_export, engine):
    """The real all-MiniLM-L6-v2 (v2-v4 format: mean pooling, Normalize, max_seq_length 256)."""
    pipe = load(minilm_export, providers=engine)
    st = SentenceTransformer(str(minilm_dir), device="cpu")
    texts = ["A man is playing a guitar.", "The new movie is awesome!",
             " ".join(["Sentence embeddings are truncated at 256 word pieces."] * 40), "Hi"]
    assert pipe.max_length == 256 and pipe.dimension == 384
    vecs = pipe(texts, return_tensors=True, batch_size=3)
    close(vecs, st.encode(texts, batch_size=3))
    np.testing.assert_allclose(np.linalg.norm(vecs, axis=1), 1.0, atol=1e-5)
    close(pipe(texts, prompt="query: ", return_tensors=True),
          st.encode(texts, prompt="query: "))


@pytest.mark.slow
@pytest.mark.skipif(not BF16, reason=NO_BF16)
def test_minilm_in_bf16_is_within_its_gate_of_sentence_transformers(minilm_dir, minilm_export):
    """OpenVINO bf16 (what `auto` runs on AMX): every text's vector at cosine >= the bf16 gate
    of sentence-transformers' fp32 one, on prose of many lengths in padded batches."""
    texts = [" ".join(["Sentence embeddings of longer passages drift further in bf16."] * n)
             for n in (1, 3, 9, 30)] + ["A man is playing a guitar.", "Hi", "The new movie!"]
    got = load(minilm_export, providers="openvino:bf16")(texts, return_tensors=True,
                                                         batch_size=4)
    want = st_vectors = SentenceTransformer(str(minilm_dir), device="cpu").encode(texts)
    cos = (got * want).sum(1) / np.linalg.norm(got, axis=1) / np.linalg.norm(st_vectors, axis=1)
    assert cos.mean() >= BF16_MIN_MEAN_COSINE, cos
    assert np.abs(got - want).max() > 1e-6           # bf16 did run: not the f32 answers


def _window_reference(st, text: str, prompt: str, overlap: int) -> np.ndarray:
    """long_inputs="chunk" by hand in torch: transformers' tokenizer windows the prompted text
    (overflow with stride), sentence-transformers' modules before Normalize pool each window
    (the prompt's tokens left out of the first only), and the windows' vectors are averaged
    weighted by their tokens, then normalized."""
    windows = st.tokenizer(prompt + text, truncation=True, max_length=st.max_seq_length,
                           stride=overlap, return_overflowing_tokens=True)["input_ids"]
    # the prompt's tokens: it encoded alone, less the [SEP] it ends with
    prompt_length = len(st.tokenizer(prompt)["input_ids"]) - 1 if prompt else 0
    assert st[1].include_prompt is False
    vectors, weights = [], []
    with torch.inference_mode():
        for i, ids in enumerate(windows):
            ids = torch.tensor([ids])
            features = {"input_ids": ids, "attention_mask": torch.ones_like(ids),
                        "token_type_ids": torch.zeros_like(ids)}
            if i == 0 and prompt_length:
                features["prompt_length"] = prompt_length
            for module in list(st)[:-1]:          # all but Normalize
                features = module(features)
            vectors.append(features["sentence_embedding"][0].numpy())
            weights.append(len(ids[0]))
    mean = np.average(np.stack(vectors), axis=0, weights=weights)
    return mean / np.linalg.norm(mean)


def test_long_inputs_chunk_is_the_token_weighted_mean_of_its_windows(folders):
    """A text past the model's 20 tokens, windowed instead of truncated, equals the windows
    pooled by sentence-transformers' own modules and averaged by hand; a text that fits is
    one window (the truncating path's vector); the prompt's tokens leave only window 0."""
    from bertonnx.runtime.core.pipelines.chunks import overlap

    src, onnx = folders["v5"]
    pipe, st = load(onnx), SentenceTransformer(str(src), device="cpu")
    assert (pipe.max_length, overlap(pipe.max_length)) == (20, 2)
    texts = [LONG, "a dog", LONG[:90]]
    for kwargs, prompt in (({}, PROMPTS["query"]), ({"prompt": ""}, "")):
        got = pipe(texts, long_inputs="chunk", return_tensors=True, batch_size=3, **kwargs)
        for text, vector in zip(texts, got):
            close(vector, _window_reference(st, text, prompt, overlap(20)))
        close(got[1], pipe("a dog", return_tensors=True, **kwargs))
        # dimensions cuts the text's vector (its windows' mean), then normalizes again
        short = pipe(texts, long_inputs="chunk", dimensions=8, return_tensors=True, **kwargs)
        close(short, got[:, :8] / np.linalg.norm(got[:, :8], axis=1, keepdims=True))
    assert not np.allclose(got[0], pipe(LONG, return_tensors=True, prompt=""), atol=1e-3)
    with pytest.raises(InputError, match="pooling 'none'"):
        pipe(LONG, long_inputs="chunk", pooling="none")
