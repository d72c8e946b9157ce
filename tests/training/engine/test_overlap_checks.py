"""`engine.overlap`: off by default, `one_step` only in server mode, each refusal one line naming the
keys, through `gspo-trl validate` / `train` and GSPOConfig alike (gspo_trl.config.sections.engine_overlap);
the probe is in the chain only when it is on, after PerfProbe (its wait is timed as generation)."""

from __future__ import annotations

import pytest

from gspo_trl.config.sections import EngineConfig
from gspo_trl.training.config import GSPOConfig
from gspo_trl.training.trainer import builtin_probes
from tests._cli_helpers import gspo_trl_main, refused_by_all_three

RECIPE = "recipes/tiny/reversal.yaml"
SERVER = {"use_vllm": "true", "vllm_mode": "server"}
SERVED = {"use_vllm": True, "vllm_mode": "server"}

REFUSALS = {
    # name: (overrides, GSPOConfig fields, phrase the one-line error must contain)
    "no vLLM": (
        {"engine.overlap": "one_step"},
        {"engine": {"overlap": "one_step"}},
        "engine.overlap: one_step generates the next rollout batch on a vLLM server",
    ),
    "colocate": (
        {"engine.overlap": "one_step", "use_vllm": "true", "vllm_mode": "colocate"},
        {"engine": {"overlap": "one_step"}, "use_vllm": True, "vllm_mode": "colocate"},
        "but the run has colocate; set use_vllm: true and vllm_mode: server",
    ),
    "staleness": (
        {"engine.overlap": "one_step", "engine.max_staleness": "1", **SERVER},
        {"engine": {"overlap": "one_step", "max_staleness": 1}, **SERVED},
        "engine.overlap: one_step with engine.max_staleness: 1",
    ),
    "engine log-probs": (
        {"engine.overlap": "one_step", "engine.old_logprobs": "engine", **SERVER},
        {
            "engine": {"overlap": "one_step", "old_logprobs": "engine"},
            "use_vllm": True,
            "vllm_mode": "server",
        },
        "engine.overlap: one_step with engine.old_logprobs: engine",
    ),
    "unknown": (
        {"engine.overlap": "two_step"},
        {"engine": {"overlap": "two_step"}},
        "engine.overlap must be one of off, one_step, got 'two_step'",
    ),
}


def argv(overrides: dict[str, str]) -> list[str]:
    return [RECIPE, *(part for key, value in overrides.items() for part in (f"--{key}", value))]


@pytest.mark.parametrize("name", REFUSALS)
def test_refusals_name_the_key_in_one_line(name, tmp_path, capsys):
    overrides, fields, phrase = REFUSALS[name]
    line, message = refused_by_all_three(argv(overrides), fields, capsys, str(tmp_path))
    assert phrase in line
    assert phrase in message


def test_off_by_default_and_accepted_in_server_mode(tmp_path):
    assert EngineConfig().overlap == "off"
    assert gspo_trl_main(["validate", *argv({"engine.overlap": "one_step", **SERVER})]) == 0
    base = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", use_vllm=True, vllm_mode="server")
    names = [type(p).__name__ for p in builtin_probes(GSPOConfig(**base, engine={"overlap": "one_step"}))]
    assert names.index("PerfProbe") < names.index("OverlapProbe")
    assert "OverlapProbe" not in [type(p).__name__ for p in builtin_probes(GSPOConfig(**base))]


def test_dynamic_sampling_is_accepted_and_runs_outside_the_overlap(tmp_path):
    """Refill rounds are no longer refused (test_overlap_server.py runs them against a real server):
    dynamic sampling wraps every probe, so the overlap sees each generation round of a batch."""
    dynamic = {"engine.overlap": "one_step", "sampling.dynamic": "true", **SERVER}
    assert gspo_trl_main(["validate", *argv(dynamic)]) == 0
    base = dict(output_dir=str(tmp_path), use_cpu=True, report_to="none", **SERVED)
    args = GSPOConfig(**base, engine={"overlap": "one_step"}, sampling={"dynamic": True})
    names = [type(p).__name__ for p in builtin_probes(args)]
    assert names.index("DynamicSamplingProbe") < names.index("OverlapProbe")
