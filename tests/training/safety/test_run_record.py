"""The run record compares every section key by key on --resume: a `launch:` change (it trains
nothing differently) is fine to change, a `sampling:` change names its key (issue 46)."""

from __future__ import annotations

import json
import logging

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.core.errors import RunDirError
from gspo_trl.training.safety.run_record import RUN_RECORD, compare_records, run_record
from tests._paths import ROOT

RECIPE = ROOT / "recipes" / "tiny" / "reversal.yaml"


def _started_with(folder, overrides: dict) -> None:
    (folder / RUN_RECORD).write_text(json.dumps(run_record(load_recipe(RECIPE, overrides), None)))


def test_a_launch_change_is_harmless_on_resume(tmp_path, caplog) -> None:
    _started_with(tmp_path, {"launch.seconds_per_step": "[1.0]"})
    with caplog.at_level(logging.WARNING):
        compare_records(tmp_path, run_record(load_recipe(RECIPE, {"launch.seconds_per_step": "[2.0]"}), None))
    assert "fine to change" in caplog.text and "launch.seconds_per_step ([1.0] -> [2.0])" in caplog.text


def test_a_sampling_change_names_its_key(tmp_path) -> None:
    _started_with(tmp_path, {"sampling.dynamic": "true"})
    changed = {"sampling.dynamic": "true", "sampling.max_rounds": "2"}
    with pytest.raises(RunDirError, match=r"different run: sampling\.max_rounds \(") as error:
        compare_records(tmp_path, run_record(load_recipe(RECIPE, changed), None))
    assert "sampling.dynamic" not in str(error.value)


def test_every_registered_section_is_a_field_where_it_is_read() -> None:
    from dataclasses import fields

    from gspo_trl.config.recipe import Recipe
    from gspo_trl.config.sections import SECTION_NAMES, TRAINER_SECTIONS
    from gspo_trl.training.config import GSPOConfig

    assert set(SECTION_NAMES) <= {f.name for f in fields(Recipe)}
    assert {s.name for s in TRAINER_SECTIONS} <= {f.name for f in fields(GSPOConfig)}
