"""Parameter counts against the Qwen3 model cards, KV bytes per token, and config loading."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from gspo_trl.plan import PlanError, load_model_shape, shipped_models

# Qwen3 model cards on the hub: "Number of Parameters: X (Y non-embedding)", MoE "activated".
CARDS = [
    # hub id, total (B), non-embedding (B), activated (B)
    ("Qwen/Qwen3-0.6B", 0.6, 0.44, 0.6),
    ("Qwen/Qwen3-1.7B", 1.7, 1.4, 1.7),
    ("Qwen/Qwen3-4B", 4.0, 3.6, 4.0),
    ("Qwen/Qwen3-8B", 8.2, 6.95, 8.2),
    ("Qwen/Qwen3-14B", 14.8, 13.2, 14.8),
    ("Qwen/Qwen3-32B", 32.8, 31.2, 32.8),
    ("Qwen/Qwen3-30B-A3B", 30.5, 29.9, 3.3),
]


@pytest.mark.parametrize(("hub_id", "total", "non_embedding", "active"), CARDS)
def test_parameter_counts_match_the_model_cards_within_2_percent(hub_id, total, non_embedding, active):
    shape = load_model_shape(hub_id)
    assert shape.total_params / 1e9 == pytest.approx(total, rel=0.02)
    assert shape.non_embedding_params / 1e9 == pytest.approx(non_embedding, rel=0.02)
    assert shape.active_params / 1e9 == pytest.approx(active, rel=0.02)


def test_every_shipped_config_has_a_card_row():
    assert set(shipped_models()) == {row[0] for row in CARDS}


def test_qwen3_0_6b_exact_count():
    # 28 x (q 1024x2048 + k,v 2 x 1024x1024 + o 2048x1024 + q/k norms 2x128 + MLP 3x1024x3072
    #       + 2 norms 2x1024) + final norm 1024 + tied embedding 151936x1024
    per_layer = 1024 * 2048 + 2 * 1024 * 1024 + 2048 * 1024 + 2 * 128 + 3 * 1024 * 3072 + 2 * 1024
    assert per_layer * 28 + 1024 + 151936 * 1024 == 596_049_920
    assert load_model_shape("Qwen/Qwen3-0.6B").total_params == 596_049_920


@pytest.mark.parametrize(
    ("hub_id", "lm_head"),
    [("Qwen/Qwen3-0.6B", 0), ("Qwen/Qwen3-4B", 0), ("Qwen/Qwen3-8B", 151936 * 4096)],
)
def test_tied_embeddings_have_no_separate_lm_head(hub_id, lm_head):
    assert load_model_shape(hub_id).lm_head_params == lm_head


# layers x kv_heads x head_dim x 2 (K and V) x 2 bytes (bf16), worked out by hand
KV_BYTES_PER_TOKEN = [
    ("Qwen/Qwen3-0.6B", 28 * 8 * 128 * 2 * 2, 114_688),
    ("Qwen/Qwen3-1.7B", 28 * 8 * 128 * 2 * 2, 114_688),
    ("Qwen/Qwen3-4B", 36 * 8 * 128 * 2 * 2, 147_456),
    ("Qwen/Qwen3-8B", 36 * 8 * 128 * 2 * 2, 147_456),
    ("Qwen/Qwen3-14B", 40 * 8 * 128 * 2 * 2, 163_840),
    ("Qwen/Qwen3-32B", 64 * 8 * 128 * 2 * 2, 262_144),
    ("Qwen/Qwen3-30B-A3B", 48 * 4 * 128 * 2 * 2, 98_304),
]


@pytest.mark.parametrize(("hub_id", "formula", "value"), KV_BYTES_PER_TOKEN)
def test_kv_bytes_per_token(hub_id, formula, value):
    assert formula == value
    assert load_model_shape(hub_id).kv_bytes_per_token(2) == value


def test_moe_layers_follow_sparse_step_and_mlp_only_layers(tmp_path: Path):
    config = json.loads((Path(shipped_models()["Qwen/Qwen3-30B-A3B"])).read_text())
    assert load_model_shape("Qwen/Qwen3-30B-A3B").num_moe_layers == 48
    config.update(decoder_sparse_step=2, mlp_only_layers=[1])
    (tmp_path / "config.json").write_text(json.dumps(config))
    shape = load_model_shape(str(tmp_path))
    assert [i for i in range(6) if shape.is_moe_layer(i)] == [3, 5]  # layer 1 is dense by request


@pytest.mark.parametrize("name", ["Qwen/Qwen3-8B", "qwen/qwen3-8b", "Qwen3-8B"])
def test_shipped_ids_resolve_case_insensitively(name):
    assert load_model_shape(name).hidden_size == 4096


def test_local_directory_and_file(tmp_path: Path):
    config = {"vocab_size": 1000, "hidden_size": 64, "intermediate_size": 128, "num_hidden_layers": 2}
    config["num_attention_heads"] = 4  # no num_key_value_heads / head_dim: MHA, 64 / 4
    (tmp_path / "config.json").write_text(json.dumps(config))
    for source in (str(tmp_path), str(tmp_path / "config.json")):
        shape = load_model_shape(source)
        assert (shape.num_kv_heads, shape.head_dim, shape.tie_word_embeddings) == (4, 16, False)


def test_unknown_model_and_missing_key_are_named(tmp_path: Path):
    with pytest.raises(PlanError, match="'Qwen/Qwen9-1B'"):
        load_model_shape("Qwen/Qwen9-1B")
    (tmp_path / "config.json").write_text(json.dumps({"vocab_size": 10}))
    with pytest.raises(PlanError, match="'hidden_size'"):
        load_model_shape(str(tmp_path))
