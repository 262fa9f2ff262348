"""The BERT family on the one encoder: every model_type x every task against transformers.

For each family and task: a tiny random transformers checkpoint (tests/conftest.py) loads into
our model with no weight drawn, matches transformers on a padded batch (HF_ATOL, unpadded
positions; see _compare.py), and our save_pretrained folder reloads in
`transformers.AutoModelFor<Task>` as the family's own class with no missing or unexpected keys
and outputs identical to the original's. Plus what only some families have: RoBERTa's positions
under left padding, ALBERT's layer groups, ELECTRA's generator and discriminator checkpoints.
"""
from __future__ import annotations

import json

import pytest
import torch
import transformers

from bertonnx.build import BertConfig, build_model, load_checkpoint
from bertonnx.build.checkpoint import infer_task
from bertonnx.build.keys import KEY_TABLES
from bertonnx.runtime.core.contract import ARCHITECTURE_TASKS, hf_class
from bertonnx.runtime.core.families import FAMILIES
from bertonnx.runtime.core.tasks import EXPORT_TASKS
from bertonnx.runtime.core.errors import ConfigError

from ._compare import HF_OUTPUTS, as_tuple, assert_close, padded_batch

AUTO = {"fill-mask": "AutoModelForMaskedLM",
        "text-classification": "AutoModelForSequenceClassification",
        "token-classification": "AutoModelForTokenClassification",
        "question-answering": "AutoModelForQuestionAnswering",
        "feature-extraction": "AutoModel"}


def batch_for(config: BertConfig, T: int = 13, *, lengths=None, seed: int = 0):
    return padded_batch(config.vocab_size, T, config.type_vocab_size, seed=seed,
                        lengths=lengths or (T, T - 4, 2), pad_token_id=config.pad_token_id)


def run_both(ours, hf, batch):
    """Both models on the batch; DistilBERT's take no token_type_ids."""
    ids, mask, types = batch
    kwargs = {"token_type_ids": types} if ours.config.type_vocab_size else {}
    with torch.no_grad():
        return (ours(ids, attention_mask=mask, token_type_ids=types),
                hf(input_ids=ids, attention_mask=mask, **kwargs))


def reload_with_auto(folder, task):
    """transformers' Auto class on our folder, asserting nothing was missing or left over."""
    model, info = getattr(transformers, AUTO[task]).from_pretrained(
        folder, output_loading_info=True)
    assert info["missing_keys"] == [] and info["unexpected_keys"] == [], info
    assert info["mismatched_keys"] == [] and info["error_msgs"] == [], info
    return model.eval()


def check_family(folder, task, tmp_path, *, lengths=None):
    """Load `folder` both ways, compare, save ours, reload with transformers, compare again."""
    loaded = load_checkpoint(folder, task)
    assert loaded.head_initialised == []
    ours = loaded.model
    ref = reload_with_auto(folder, task)
    batch = batch_for(ours.config, lengths=lengths)
    ours_out, ref_out = run_both(ours, ref, batch)
    assert_close(task, ours_out, ref_out, batch[1])

    out = ours.save_pretrained(tmp_path / f"saved-{task}")
    saved = json.loads((out / "config.json").read_text())
    assert saved["model_type"] == ours.config.model_type
    assert saved["architectures"] == [ours.hf_class]
    back = reload_with_auto(out, task)
    assert type(back).__name__ == ours.hf_class
    with torch.no_grad():
        again = back(input_ids=batch[0], attention_mask=batch[1],
                     **({"token_type_ids": batch[2]} if ours.config.type_vocab_size else {}))
    for name in HF_OUTPUTS[task]:  # same weights, same code: bit for bit
        assert torch.equal(getattr(again, name), getattr(ref_out, name)), name
    assert infer_task(out) == task
    return ours, ref, out


FAMILY_TYPES = tuple(FAMILIES)


# the tasks with a transformers class of their own; the others run on one of those classes
# (sparse-embedding on ForMaskedLM, reranking on ForSequenceClassification) and are tested with
# their pipelines
OWN_CLASS_TASKS = tuple(t for t in EXPORT_TASKS if ARCHITECTURE_TASKS[hf_class(t)] == t)


@pytest.mark.parametrize("task", OWN_CLASS_TASKS)
@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_every_family_and_task_loads_matches_and_saves(tiny_hf_checkpoint, tmp_path, model_type,
                                                        task):
    folder = tiny_hf_checkpoint(task, model_type=model_type)
    assert infer_task(folder) == task
    ours, ref, _ = check_family(folder, task, tmp_path)
    assert ours.hf_class == type(ref).__name__ == hf_class(task, model_type)
    # the pooler exists exactly where the family's class has one (ALBERT classifies on it;
    # DeBERTa's ContextPooler sits beside its base model)
    has_pooler = any(getattr(m, "pooler", None) is not None for m in (ref, ref.base_model))
    assert (ours.encoder.pooler is not None) == has_pooler


def test_roberta_positions_count_from_the_padding_when_left_padded(tiny_hf_checkpoint, tmp_path):
    # Right padding leaves positions pad+1.. pad+n, the same as an arange shifted by pad + 1;
    # left padding tells the two apart, as transformers numbers only the non-pad tokens.
    folder = tiny_hf_checkpoint("feature-extraction", model_type="roberta")
    ours = load_checkpoint(folder, "feature-extraction").model
    ref = reload_with_auto(folder, "feature-extraction")
    ids, mask, types = batch_for(ours.config)
    left_ids, left_mask = ids.flip(1), mask.flip(1)
    ours_out, ref_out = run_both(ours, ref, (left_ids, left_mask, types))
    assert_close("feature-extraction", ours_out, ref_out, left_mask)
    positions = ours.encoder.embeddings.positions(left_ids)
    assert positions[2, -2:].tolist() == [2, 3] and positions[2, 0].item() == 1


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_every_family_matches_transformers_with_another_pad_token_id(tiny_hf_checkpoint,
                                                                     tmp_path, model_type):
    """pad_token_id 4, no family's default, right and left padded: a family whose transformers
    code reads the padding id from elsewhere (MPNet's fixed 1) or not at all must still match
    transformers, not only our own model (issue 43: MPNet followed pad_token_id and parity,
    model against model, passed)."""
    folder = tiny_hf_checkpoint("fill-mask", model_type=model_type, pad_token_id=4)
    ours, ref, _ = check_family(folder, "fill-mask", tmp_path)
    assert ours.config.pad_token_id == 4
    ids, mask, types = batch_for(ours.config)
    left = (ids.flip(1), mask.flip(1), types.flip(1))
    assert_close("fill-mask", *run_both(ours, ref, left), left[1])


@pytest.mark.parametrize("layers,groups,inner", [(3, 1, 1), (4, 2, 2), (3, 3, 1)])
def test_albert_layer_groups_are_shared_across_depth(tiny_hf_checkpoint, tmp_path, layers,
                                                     groups, inner):
    folder = tiny_hf_checkpoint("fill-mask", model_type="albert", num_hidden_layers=layers,
                                num_hidden_groups=groups, inner_group_num=inner)
    ours, _, _ = check_family(folder, "fill-mask", tmp_path)
    assert len(ours.encoder.layers) == groups and len(ours.encoder.layers[0]) == inner
    assert len(ours.encoder.schedule) == layers


def test_albert_pretraining_checkpoint_serves_fill_mask(tiny_hf_checkpoint, tmp_path):
    folder = tiny_hf_checkpoint("fill-mask", model_type="albert", hf_class="AlbertForPreTraining")
    assert infer_task(folder) == "fill-mask"
    ours = load_checkpoint(folder, "fill-mask").model
    ref = transformers.AlbertForPreTraining.from_pretrained(folder).eval()
    batch = batch_for(ours.config)
    with torch.no_grad():
        got = ours(*batch)
        want = ref(input_ids=batch[0], attention_mask=batch[1], token_type_ids=batch[2])
    m = batch[1].bool()
    assert (got[m] - want.prediction_logits[m]).abs().max() <= 1e-5 * max(
        1.0, want.prediction_logits.abs().max().item())


@pytest.mark.parametrize("embedding_size", [16, 32])
def test_electra_generator_serves_fill_mask_with_and_without_projection(
        tiny_hf_checkpoint, tmp_path, embedding_size):
    folder = tiny_hf_checkpoint("fill-mask", model_type="electra", embedding_size=embedding_size)
    ours, _, _ = check_family(folder, "fill-mask", tmp_path)
    assert (ours.encoder.embeddings.project is not None) == (embedding_size != 32)
    assert ours.head.mlm._tied[0].weight.shape == (ours.config.vocab_size, embedding_size)


@pytest.mark.parametrize("task", ["feature-extraction", "text-classification"])
def test_electra_discriminator_checkpoint_loads_its_encoder(tiny_hf_checkpoint, task):
    folder = tiny_hf_checkpoint("fill-mask", model_type="electra",
                                hf_class="ElectraForPreTraining")
    assert infer_task(folder) == "feature-extraction"
    loaded = load_checkpoint(folder, task)
    # the replaced-token detector is dropped; a classifier head is drawn (and reported)
    assert all(k.startswith("head.") for k in loaded.head_initialised)
    assert bool(loaded.head_initialised) == (task == "text-classification")
    ref = transformers.ElectraModel.from_pretrained(folder).eval()
    batch = batch_for(loaded.model.config)
    with torch.no_grad():
        hidden, _ = loaded.model.encoder(*batch)
        want = ref(input_ids=batch[0], attention_mask=batch[1], token_type_ids=batch[2])
    m = batch[1].bool()
    assert (hidden[m] - want.last_hidden_state[m]).abs().max() <= 1e-5


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_models_built_from_our_config_save_for_transformers(tmp_path, model_type):
    # A config made here (not read from transformers) must still write every field the family's
    # heads need (DistilBERT's and ALBERT's classifier dropout is a number, never None).
    fixed = FAMILIES[model_type].fixed
    config = BertConfig(
        model_type=model_type, vocab_size=60, hidden_size=24, num_hidden_layers=2,
        num_attention_heads=3, intermediate_size=40, max_position_embeddings=40,
        pad_token_id=1, **{k: v for k, v in fixed.items() if k != "layer_norm_eps"},
        **({} if "embedding_size" in fixed else {"embedding_size": 12})).with_labels(3)
    torch.manual_seed(0)
    model = build_model(config, "text-classification").eval()
    out = model.save_pretrained(tmp_path / "scratch")
    ref = reload_with_auto(out, "text-classification")
    batch = batch_for(config, lengths=(13, 9, 2))
    assert_close("text-classification", *run_both(model, ref, batch), batch[1])
    # None ("as hidden_dropout_prob") is written as the number where the family needs one
    row = FAMILIES[model_type]
    number = ("classifier_dropout" in row.config_names.values()
              or "classifier_dropout" in row.defaults)
    assert BertConfig.from_hf(out) == (config.replace(
        classifier_dropout=config.classifier_dropout_p) if number else config)


@pytest.mark.parametrize("model_type", FAMILY_TYPES)
def test_config_round_trips_through_the_family_config_class(model_type):
    hf = transformers.AutoConfig.for_model(model_type, **{
        "bert": dict(hidden_size=20, num_attention_heads=5, type_vocab_size=3),
        "roberta": dict(hidden_size=20, num_attention_heads=5, pad_token_id=1),
        "xlm-roberta": dict(hidden_size=20, num_attention_heads=5, pad_token_id=1),
        "camembert": dict(hidden_size=20, num_attention_heads=5, pad_token_id=1),
        "distilbert": dict(dim=20, n_heads=5, hidden_dim=30, activation="relu"),
        "electra": dict(hidden_size=20, num_attention_heads=5, embedding_size=8),
        "albert": dict(hidden_size=20, num_attention_heads=5, embedding_size=8,
                       num_hidden_layers=4, num_hidden_groups=2, inner_group_num=2),
        "mpnet": dict(hidden_size=20, num_attention_heads=5, relative_attention_num_buckets=40),
        "deberta-v2": dict(hidden_size=20, num_attention_heads=5, relative_attention=True,
                           position_buckets=8, pos_att_type="c2p|p2c", share_att_key=True,
                           norm_rel_ebd="layer_norm", position_biased_input=False, legacy=False,
                           tie_word_embeddings=False),  # what lets transformers run legacy=False
        "modernbert": dict(hidden_size=20, num_attention_heads=5, local_attention=64,
                           global_attn_every_n_layers=2, classifier_pooling="mean",
                           hidden_activation="gelu_new", norm_eps=1e-6, mlp_bias=True),
    }[model_type])
    c = BertConfig.from_hf(hf.to_dict())
    assert (c.hidden_size, c.num_attention_heads, c.model_type) == (20, 5, model_type)
    written = c.to_hf()
    again = type(hf).from_dict(dict(written))  # from_dict adds keys to the dict it is given
    for name in written:  # every field we write, in the family's own name, reads back the same
        assert getattr(again, name) == getattr(hf, name), name
    assert BertConfig.from_hf(again.to_dict()) == c


def test_family_switches_are_checked_where_the_family_lacks_them():
    with pytest.raises(ConfigError, match="type_vocab_size=2 does not fit model_type 'distilbert'"):
        BertConfig(model_type="distilbert")
    with pytest.raises(ConfigError, match="embedding_size=16 does not fit model_type 'roberta'"):
        BertConfig(model_type="roberta", pad_token_id=1, embedding_size=16)
    with pytest.raises(ConfigError, match="num_hidden_groups=2 does not fit model_type 'bert'"):
        BertConfig(num_hidden_groups=2)
    with pytest.raises(ConfigError, match="task 'pretraining' is not implemented for albert"):
        build_model(BertConfig(model_type="albert", hidden_size=32, num_attention_heads=2),
                    "pretraining")


def test_unsupported_model_type_is_one_line_naming_the_supported(tiny_hf_checkpoint):
    folder = tiny_hf_checkpoint("text-classification")
    config = json.loads((folder / "config.json").read_text())
    config.update(model_type="deberta", architectures=["DebertaForSequenceClassification"])
    (folder / "config.json").write_text(json.dumps(config))
    for call in (lambda: infer_task(folder), lambda: load_checkpoint(folder, "fill-mask")):
        with pytest.raises(ConfigError) as err:
            call()
        msg = str(err.value)
        assert "model_type 'deberta' is not supported" in msg and "\n" not in msg
        assert ", ".join(FAMILIES) in msg


def test_key_tables_are_one_to_one_and_cover_every_family():
    assert set(KEY_TABLES) == {f.key_map for f in FAMILIES.values()}
    for model_type, table in KEY_TABLES.items():
        ours = [v for v in table.hf_to_ours_map.values() if v is not None]
        assert len(ours) == len(set(ours)), model_type  # used both ways: no two HF names merge
        for hf, mine in table.hf_to_ours_map.items():
            if mine is not None:
                assert table.ours_to_hf_map[mine] == hf
    assert ARCHITECTURE_TASKS["DistilBertForSequenceClassification"] == "text-classification"
    assert ARCHITECTURE_TASKS["XLMRobertaForTokenClassification"] == "token-classification"
    assert ARCHITECTURE_TASKS["ElectraForPreTraining"] == "feature-extraction"


def test_outputs_are_per_token_where_the_task_says(tiny_hf_checkpoint):
    # DistilBERT takes no token types: ours ignores them instead of indexing a missing table.
    folder = tiny_hf_checkpoint("token-classification", model_type="distilbert")
    ours = load_checkpoint(folder, "token-classification").model
    ids, mask, types = batch_for(ours.config)
    with torch.no_grad():
        a = as_tuple(ours(ids, mask, torch.ones_like(types)))[0]
        b = as_tuple(ours(ids, mask))[0]
    assert torch.equal(a, b) and a.shape == (*ids.shape, ours.config.num_labels)
