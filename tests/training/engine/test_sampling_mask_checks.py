"""Top-p, top-k and min-p against the consumers of the engine's log-probs, without an engine: the
one-line refusals through `gspo-trl validate`/`train` and GSPOConfig alike
(gspo_trl.config.sections.engine_sampler), what `engine.sampling_masks: replay` accepts, and
check-logprobs' sampler label."""

from __future__ import annotations

import pytest

from gspo_trl.config.sections import EngineConfig
from gspo_trl.config.sections.engine_sampler import describe_sampler, reshaping_settings
from gspo_trl.diagnose.check_logprobs import format_report
from tests._cli_helpers import gspo_trl_main, refused_by_all_three

RECIPE = "recipes/tiny/reversal.yaml"
VLLM = {"use_vllm": "true"}
TRUNCATE = {"engine.correction": "truncate", "use_vllm": "true"}

REFUSALS = {
    # name: (overrides, GSPOConfig fields, phrase the one-line error must contain)
    "correction, top_p": (
        {**TRUNCATE, "top_p": "0.8"},
        {"engine": {"correction": "truncate"}, "use_vllm": True, "top_p": 0.8},
        "engine.correction: truncate with top_p=0.8",
    ),
    "correction, top_k and top_p": (
        {**TRUNCATE, "top_p": "0.95", "top_k": "20"},
        {"engine": {"correction": "truncate"}, "use_vllm": True, "top_p": 0.95, "top_k": 20},
        "engine.correction: truncate with top_p=0.95, top_k=20",
    ),
    "correction, min_p via generation_kwargs": (
        {**TRUNCATE, "generation_kwargs": {"min_p": 0.1}},
        {"engine": {"correction": "truncate"}, "use_vllm": True, "generation_kwargs": {"min_p": 0.1}},
        "engine.correction: truncate with min_p=0.1",
    ),
    "correction, repetition_penalty": (
        {**TRUNCATE, "repetition_penalty": "1.1"},
        {"engine": {"correction": "truncate"}, "use_vllm": True, "repetition_penalty": 1.1},
        "engine.correction: truncate with repetition_penalty=1.1",
    ),
    "engine log-probs, top_k": (
        {"engine.old_logprobs": "engine", **VLLM, "top_k": "20"},
        {"engine": {"old_logprobs": "engine"}, "use_vllm": True, "top_k": 20},
        "engine.old_logprobs: engine with top_k=20",
    ),
    "TRL's correction, top_p, even with replay": (
        {
            **VLLM,
            "vllm_importance_sampling_correction": "true",
            "top_p": "0.8",
            "engine.sampling_masks": "replay",
        },
        {
            "engine": {"sampling_masks": "replay"},
            "use_vllm": True,
            "vllm_importance_sampling_correction": True,
            "top_p": 0.8,
        },
        "vllm_importance_sampling_correction: true with top_p=0.8",
    ),
    "replay under a repetition penalty": (
        {"engine.sampling_masks": "replay", **VLLM, "top_p": "0.8", "repetition_penalty": "1.1"},
        {"engine": {"sampling_masks": "replay"}, "use_vllm": True, "top_p": 0.8, "repetition_penalty": 1.1},
        "engine.sampling_masks: replay with repetition_penalty=1.1",
    ),
    "replay with a plain sampler": (
        {"engine.sampling_masks": "replay", **VLLM},
        {"engine": {"sampling_masks": "replay"}, "use_vllm": True},
        "engine.sampling_masks: replay with a plain sampler",
    ),
    "replay without vLLM": (
        {"engine.sampling_masks": "replay", "top_p": "0.8"},
        {"engine": {"sampling_masks": "replay"}, "top_p": 0.8},
        "engine.sampling_masks: replay renormalises the vLLM engine's log-probs",
    ),
    "unknown mode": (
        {"engine.sampling_masks": "record", **VLLM},
        {"engine": {"sampling_masks": "record"}, "use_vllm": True},
        "engine.sampling_masks must be one of off, replay",
    ),
}


def argv(overrides: dict) -> list[str]:
    parts = []
    for key, value in overrides.items():
        parts += [f"--{key}", value if isinstance(value, str) else str(value).replace("'", '"')]
    return [RECIPE, *parts]


@pytest.mark.parametrize("name", REFUSALS)
def test_refusals_name_the_keys_in_one_line(name, tmp_path, capsys):
    """`gspo-trl validate` and `gspo-trl train` exit 2 with the same one line; GSPOConfig raises it."""
    overrides, fields, phrase = REFUSALS[name]
    line, message = refused_by_all_three(argv(overrides), fields, capsys, str(tmp_path))
    assert phrase in line
    assert phrase in message


ACCEPTED = {
    "correction, plain sampler": TRUNCATE,
    "correction, sampler reset to neutral": {**TRUNCATE, "top_p": "1.0", "top_k": "0"},
    "top_p with trainer pi_old and no correction": {**VLLM, "top_p": "0.8"},
    "TRL's correction, plain sampler": {**VLLM, "vllm_importance_sampling_correction": "true"},
    "correction, top_p, replay": {**TRUNCATE, "top_p": "0.8", "engine.sampling_masks": "replay"},
    "engine log-probs, top_k, replay": {
        "engine.old_logprobs": "engine",
        **VLLM,
        "top_k": "20",
        "engine.sampling_masks": "replay",
    },
}


@pytest.mark.parametrize("name", ACCEPTED)
def test_accepted(name):
    assert gspo_trl_main(["validate", *argv(ACCEPTED[name])]) == 0


def test_sampler_as_vllm_gets_it():
    """generation_kwargs overrides the fields, as TRL's `generation_kwargs.update(...)` does; a JSON
    string is read as GRPOConfig reads it; TRL's and vLLM's "no top-k" values are neutral."""
    assert reshaping_settings({"top_p": 0.8, "generation_kwargs": {"top_p": 1.0}}) == {}
    assert reshaping_settings({"top_k": -1, "min_p": None}) == {}
    assert reshaping_settings({"generation_kwargs": '{"top_k": 20}'}) == {"top_k": 20}
    assert describe_sampler({"top_p": 1.0}) == "plain softmax"
    assert describe_sampler({"top_p": 0.8, "top_k": 20}) == "top_p=0.8, top_k=20"
    assert EngineConfig().sampling_masks == "off"


def _report(sampler: str, replayed: bool) -> dict:
    stats = {"n": 4, "mean": -0.2, "std": 0.01, "abs_max": 0.3}
    return {
        "eps_low": 3e-4,
        "eps_high": 4e-4,
        "token": stats,
        "sequence": stats,
        "by_length": {},
        "outside_clip": 1.0,
        "bias_limit": 7.5e-5,
        "max_outside_clip": 0.05,
        "problem": "bias",
        "safe": False,
        "sampler": sampler,
        "sampling_masks": "replay" if replayed else "off",
    }


def test_check_logprobs_verdict_names_the_sampler():
    plain = format_report(_report("plain softmax", False))
    assert "sampler measured: plain softmax" in plain
    shaped = format_report(_report("top_p=0.8", False))
    assert "sampler measured: top_p=0.8" in shaped and "-log S_t" in shaped and "not engine bias" in shaped
    replayed = format_report(_report("top_p=0.8", True))
    assert "renormalised over the kept set" in replayed
