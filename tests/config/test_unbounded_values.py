"""Values that only bite in combination, refused in one line before anything loads, by validate
(and train, which runs it first) and by GSPOConfig: a round cap of a million with a task whose
groups always tie, a staleness the engine would never sync at, a calibration report that is a
device or a FIFO (read whole: MemoryError; or a hang), every reward weight 0 (trains on nothing,
exit 0), a section field of the wrong type built directly (a bare TypeError)."""

from __future__ import annotations

import os

import pytest

from gspo_trl.config.sections import EngineConfig, SamplingConfig
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.config import GSPOConfig
from tests._cli_helpers import refused_alike

TINY = "recipes/tiny/reversal.yaml"
VLLM = ["--use_vllm", "true"]
CORRECTION = ["--engine.correction", "truncate", "--engine.thresholds_from"]
ZERO_WEIGHT = '[{"name": "gspo_trl.data.synthetic:digit_reversal_reward", "weight": 0}]'
DEV_ZERO = {"correction": "truncate", "thresholds_from": "/dev/zero"}


@pytest.fixture
def fifo(tmp_path):
    path = tmp_path / "report.fifo"
    os.mkfifo(path)
    return str(path)


@pytest.mark.parametrize(
    ("flags", "phrase"),
    [
        (["--sampling.dynamic", "true", "--sampling.max_rounds", "1000000"], "sampling.max_rounds must be"),
        ([*VLLM, "--engine.max_staleness", "1000000000"], "engine.max_staleness must be"),
        ([*VLLM, *CORRECTION, "/dev/zero"], "not a regular file"),
        (["--rewards", ZERO_WEIGHT], "every reward weight is 0"),
    ],
)  # fmt: skip
def test_refused_alike_by_validate_and_train(flags, phrase, capsys):
    line = refused_alike([TINY, *flags], capsys)
    assert phrase in line, line


def test_a_fifo_report_is_refused_not_read(fifo, capsys):
    line = refused_alike(
        [TINY, *VLLM, "--engine.correction", "truncate", "--engine.thresholds_from", fifo], capsys
    )
    assert "not a regular file" in line, line


@pytest.mark.parametrize(
    ("build", "phrase"),
    [
        (lambda: SamplingConfig(warn_capped_batches="x"), "sampling.warn_capped_batches must be >= 1"),
        (lambda: SamplingConfig(max_rounds=10**6), "sampling.max_rounds must be"),
        (lambda: EngineConfig(max_staleness=10**9), "engine.max_staleness must be"),
        (lambda: GSPOConfig(use_cpu=True, use_vllm=True, engine=DEV_ZERO), "not a regular file"),
        (lambda: GSPOConfig(use_cpu=True, reward_weights=[0.0, 0.0]), "every reward weight is 0"),
    ],
)  # fmt: skip
def test_refused_when_built_directly(build, phrase):
    with pytest.raises(RecipeError, match=phrase):
        build()
