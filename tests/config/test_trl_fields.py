"""The GRPOConfig field snapshot that makes recipe refusals fast matches the installed TRL."""

from __future__ import annotations

import json

from gspo_trl.config import trl_fields


def test_snapshot_equals_the_live_grpo_config() -> None:
    stored = json.loads(trl_fields.SNAPSHOT.read_text(encoding="utf-8"))
    assert stored == trl_fields.describe_live(), "regenerate: python -m gspo_trl.config.trl_fields"


def test_a_different_trl_version_reads_the_live_class(monkeypatch) -> None:
    trl_fields._table.cache_clear()
    monkeypatch.setattr(trl_fields.importlib.metadata, "version", lambda name: "0.0-other")
    try:
        monkeypatch.setattr(trl_fields, "describe_live", lambda: {"trl_version": "0.0-other", "fields": {}})
        assert trl_fields.grpo_field_types() == {}
    finally:
        trl_fields._table.cache_clear()


def test_types_and_defaults_a_recipe_relies_on() -> None:
    types = trl_fields.grpo_field_types()
    assert types["learning_rate"] is float and types["max_steps"] is int
    assert trl_fields.grpo_default("num_generations") == 8
    assert trl_fields.grpo_default("temperature") == 1.0
