"""Dynamic sampling (`sampling: {dynamic: true}`) in real GSPOTrainer steps on the tiny model.

The prompts say whether their group ties (tests/training/_dynamic_sampling_run.py): `tied i`
prompts get reward 1.0 on every completion (advantage 0), `open i` prompts a spread reward. So
what the loss trains on can be read off its inputs' decoded prompts and advantages.
"""

from __future__ import annotations

import collections
import json
import os
import re
import socket
import subprocess
import sys

import pytest
import torch

import gspo_trl.core.metric_names as names
from gspo_trl.training.probes.dynamic_sampling import RefillStream, informative_groups, refill_size
from gspo_trl.training.probes.routing import RoutingProbe
from gspo_trl.training.reporting.console_lines import ConsoleCallback
from tests._gspo_helpers import single_torch_thread, tiny_model_dir  # noqa: F401 (fixture)
from tests._paths import ROOT
from tests.training._dynamic_sampling_run import build

DYNAMIC_METRICS = (
    names.DYNAMIC_GROUPS_KEPT,
    names.DYNAMIC_KEEP_RATE,
    names.DYNAMIC_ROUNDS,
    names.DYNAMIC_PROMPTS_PER_KEPT_GROUP,
    names.DYNAMIC_DROPPED_TOKENS,
    names.DYNAMIC_PADDED_GROUPS,
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("dynamic"))


def _logged(trainer, key: str) -> list[float]:
    return [event[key] for event in trainer.state.log_history if key in event]


def test_trains_only_on_informative_groups(model_dir, tmp_path):
    """A third of the prompts are open: with dynamic sampling every minibatch the loss reads holds
    only open prompts, none with a zero advantage, at the full batch shape (steps_per_generation 2:
    TRL's shuffle and split of the refilled batch); without it, tied rows with zero advantage are
    trained on. Every gspo/dynamic/* metric is logged."""
    trainer, recorder = build(model_dir, tmp_path / "on", "tto", {"dynamic": True, "max_rounds": 8})
    trainer.train()
    assert len(recorder.minibatches) == 4
    for minibatch in recorder.minibatches:
        assert all(p.startswith("open") for p in minibatch["prompts"]), minibatch["prompts"]
        assert all(a != 0.0 for a in minibatch["advantages"]), minibatch["advantages"]
        assert minibatch["shape"][0] == 4 and minibatch["old_logps"]
    assert max(len([r for r in recorder.rounds if r[0] == step]) for step in (0, 2)) > 1  # it refilled
    for key in DYNAMIC_METRICS:
        assert _logged(trainer, key), key
    assert _logged(trainer, names.DYNAMIC_GROUPS_KEPT) == [2.0, 2.0]
    assert _logged(trainer, names.DYNAMIC_PADDED_GROUPS) == [0.0, 0.0]
    assert all(t > 0 for t in _logged(trainer, names.DYNAMIC_DROPPED_TOKENS))

    plain, plain_recorder = build(model_dir, tmp_path / "off", "tto", None)
    plain.train()
    trained = [
        (p, a) for m in plain_recorder.minibatches for p, a in zip(m["prompts"], m["advantages"], strict=True)
    ]
    assert any(p.startswith("tied") and a == 0.0 for p, a in trained)
    assert not _logged(plain, names.DYNAMIC_ROUNDS)
    assert all(len([r for r in plain_recorder.rounds if r[0] == step]) == 1 for step in (0, 2))


def test_round_cap_pads_with_informative_groups(model_dir, tmp_path):
    """One prompt in four is open, max_rounds 2, 6 rollout batches: none takes more than 2 rounds,
    and a batch short at the cap is filled by repeating its open groups (full shape, no tied row;
    seed 0 gives such batches: the test checks it saw one)."""
    sampling = {"dynamic": True, "max_rounds": 2}
    trainer, recorder = build(model_dir, tmp_path / "cap", "ttto", sampling, max_steps=12)
    trainer.train()
    per_rollout = collections.Counter(step for step, _ in recorder.rounds)
    assert len(per_rollout) == 6 and max(per_rollout.values()) == 2, per_rollout
    assert _logged(trainer, names.DYNAMIC_ROUNDS) == [float(n) for _, n in sorted(per_rollout.items())]
    padded = _logged(trainer, names.DYNAMIC_PADDED_GROUPS)
    kept = _logged(trainer, names.DYNAMIC_GROUPS_KEPT)
    short = [step for step, k, p in zip(sorted(per_rollout), kept, padded, strict=True) if 0 < k < 2]
    assert short and all(kept[i] + padded[i] == 2.0 for i in range(6) if kept[i] > 0)
    for minibatch in recorder.minibatches:
        assert minibatch["shape"][0] == 4
        if minibatch["step"] // 2 * 2 in short:
            assert all(p.startswith("open") for p in minibatch["prompts"]), minibatch["prompts"]


def test_no_informative_group_trains_as_generated_and_warns(model_dir, tmp_path):
    """Every prompt ties: the cap is hit with nothing kept, the batch is TRL's as generated (all
    advantages 0), and after warn_capped_batches such batches in a row the alarm names the filter."""
    sampling = {"dynamic": True, "max_rounds": 2, "warn_capped_batches": 2}
    trainer, recorder = build(model_dir, tmp_path / "tied", "t", sampling)
    trainer.train()
    assert _logged(trainer, names.DYNAMIC_GROUPS_KEPT) == [0.0, 0.0]
    assert all(a == 0.0 for m in recorder.minibatches for a in m["advantages"])
    assert all(m["shape"][0] == 4 for m in recorder.minibatches)
    # GSPOTrainer prints alarms as the CLI does, as `!` lines of its console (not log records)
    console = next(c for c in trainer.callback_handler.callbacks if isinstance(c, ConsoleCallback))
    alarms = [alarm for alarm in console.alarms if "gspo-trl filter" in alarm]
    assert len(alarms) == 1 and "2 rollout batches in a row" in alarms[0]


@pytest.mark.slow
def test_moe_routing_replay_moves_with_the_rows(tmp_path):
    """A tiny MoE with routing_replay: old: pi_old's recorded experts travel with the refilled rows
    ((B, layers, P + C, k) padded over prompt and completion), so every update replays the routing
    of its own rows: the trainer's router agrees with it (flip rate 0 on the on-policy minibatch)."""
    from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe
    from gspo_trl.training.probes.routing import ROUTED_EXPERTS

    spec = TinyMoeSpec(num_hidden_layers=2, hidden_size=64, moe_intermediate_size=64, num_attention_heads=2)
    moe_dir = save_tiny_moe(tmp_path / "moe", spec)
    sampling = {"dynamic": True, "max_rounds": 8}
    trainer, recorder = build(moe_dir, tmp_path / "run", "tto", sampling, moe={"routing_replay": "old"})
    seen = []
    original = trainer.probes.find(RoutingProbe).routing.begin_update

    def begin_update(inputs):
        seen.append(
            (inputs[ROUTED_EXPERTS].shape, inputs["prompt_ids"].shape, inputs["completion_ids"].shape)
        )
        return original(inputs)

    trainer.probes.find(RoutingProbe).routing.begin_update = begin_update
    trainer.train()
    assert seen and all(r[0] == p[0] and r[2] == p[1] + c[1] for r, p, c in seen)
    assert all(p.startswith("open") for m in recorder.minibatches for p in m["prompts"])
    flips = _logged(trainer, names.under(names.minibatch(1), names.FLIP_RATE))
    assert flips and all(f == 0.0 for f in flips)
    assert max(_logged(trainer, names.DYNAMIC_ROUNDS)) > 1


def test_resume_continues_the_prompt_stream(model_dir, tmp_path):
    """A run resumed from its step-2 checkpoint generates the same rounds of prompts for steps 2-3
    as the run that went on: the main stream (transformers' skip) and the refill stream (its
    position in trainer_state.json) both continue where they were."""
    config = dict(save_strategy="steps", save_steps=2, max_steps=4)
    sampling = {"dynamic": True, "max_rounds": 4}
    first, first_recorder = build(model_dir, tmp_path / "run", "tto", sampling, **config)
    first.train()
    state = json.loads((tmp_path / "run" / "checkpoint-2" / "trainer_state.json").read_text())
    assert state["stateful_callbacks"]["GSPODynamicSampling"]["attributes"]["groups_drawn"] > 0
    resumed, resumed_recorder = build(model_dir, tmp_path / "resumed", "tto", sampling, **config)
    resumed.train(resume_from_checkpoint=str(tmp_path / "run" / "checkpoint-2"))
    later = [r for r in first_recorder.rounds if r[0] >= 2]
    assert len(later) > 1  # step 2's rollout refilled: the refill stream is what is checked
    assert resumed_recorder.rounds == later


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(600)
def test_two_gloo_ranks_keep_the_same_groups(tmp_path):
    """Two processes (accelerate, gloo on CPU): both ranks log the same kept/rounds figures, train
    minibatches of the same shape, and together hold whole open groups (4 rows of each prompt).
    On a tiny MoE whose replayed routing is int16, as engine routing hands it: gloo (like NCCL)
    has no int16 all-gather, so moving those rows crashed the first refilled batch."""
    from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe

    spec = TinyMoeSpec(num_hidden_layers=2, hidden_size=64, moe_intermediate_size=64, num_attention_heads=2)
    model_dir = save_tiny_moe(tmp_path / "moe", spec)
    env = {**os.environ, "PYTHONPATH": str(ROOT), "TOKENIZERS_PARALLELISM": "false", "OMP_NUM_THREADS": "1"}
    command = [
        sys.executable, "-m", "accelerate.commands.launch", "--multi_gpu", "--num_processes", "2",
        "--num_machines", "1", "--mixed_precision", "no", "--dynamo_backend", "no",
        "--main_process_port", str(free_port()),
        str(ROOT / "tests" / "training" / "_dynamic_sampling_run.py"), str(tmp_path), str(model_dir), "moe",
    ]  # fmt: skip
    result = subprocess.run(
        ["timeout", "-k", "10", "420", *command], env=env, capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stderr[-3000:]
    ranks = [json.loads((tmp_path / f"rank{i}.json").read_text()) for i in (0, 1)]
    figures = [
        [{k: e[k] for k in DYNAMIC_METRICS if k in e} for e in r["logs"] if names.DYNAMIC_ROUNDS in e]
        for r in ranks
    ]
    assert figures[0] and figures[0] == figures[1]
    assert len(ranks[0]["rounds"]) == len(ranks[1]["rounds"])
    shapes = [[m["shape"][0] for m in r["minibatches"]] for r in ranks]
    assert shapes[0] == shapes[1] and set(shapes[0]) == {4}
    for step in {m["step"] // 2 * 2 for m in ranks[0]["minibatches"]}:
        prompts = collections.Counter(
            p for r in ranks for m in r["minibatches"] if m["step"] // 2 * 2 == step for p in m["prompts"]
        )
        assert all(p.startswith("open") for p in prompts), prompts
        assert all(count % 4 == 0 for count in prompts.values()), prompts


@pytest.mark.parametrize(
    ("rewards", "informative"),
    [
        ([[1.0], [1.0], [1.0], [1.0]], [False]),
        ([[1.0], [0.0], [1.0], [1.0]], [True]),
        ([[float("nan")], [0.5], [0.5], [0.5]], [False]),  # an unscored row does not break a tie
        ([[float("nan")]] * 4, [False]),
        ([[1.0, 0.0], [0.0, 1.0], [1.0, 0.0], [0.0, 1.0]], [False]),  # weighted sums tie
    ],
)
def test_informative_groups_table(rewards, informative):
    values = torch.tensor(rewards)
    weights = torch.ones(values.shape[1])
    assert informative_groups(values, weights, 4).tolist() == informative


@pytest.mark.parametrize(
    ("missing", "kept", "drawn", "target", "step", "expected"),
    [
        (1, 1, 2, 2, 1, 2),  # keep rate 1/2: 2 groups for the one missing
        (3, 0, 8, 8, 1, 8),  # nothing kept yet: a whole generation batch
        (1, 7, 8, 8, 1, 2),  # ceil(1 * 8 / 7)
        (1, 7, 8, 8, 2, 2),
        (3, 1, 4, 4, 2, 4),  # capped at a generation batch, even per rank
    ],
)
def test_refill_size_table(missing, kept, drawn, target, step, expected):
    assert refill_size(missing, kept, drawn, target, step) == expected


def test_sampling_section_is_off_by_default_and_checked_against_the_aggregation(tmp_path):
    from gspo_trl.config.recipe import load_recipe, recipe_as_yaml
    from gspo_trl.config.sections import SamplingConfig
    from gspo_trl.config.validation import validate
    from gspo_trl.core.errors import RecipeError
    from gspo_trl.training.config import GSPOConfig

    base = {"output_dir": str(tmp_path), "use_cpu": True, "report_to": "none"}
    assert GSPOConfig(**base).sampling == SamplingConfig(dynamic=False)
    assert "\nsampling:" not in recipe_as_yaml(load_recipe("tiny/reversal"))
    on = load_recipe("tiny/reversal", ["--sampling.dynamic", "true", "--sampling.max_rounds", "5"])
    assert on.sampling == SamplingConfig(dynamic=True, max_rounds=5)
    assert "sampling:\n  dynamic: true\n  max_rounds: 5" in recipe_as_yaml(on)
    bad = {"sampling": {"dynamic": True}, "multi_objective_aggregation": "normalize_then_sum"}
    with pytest.raises(RecipeError, match=r"sampling\.dynamic drops the groups"):
        validate(load_recipe("tiny/reversal", bad, partial=True), processes=1)
    with pytest.raises(RecipeError, match=r"sampling\.dynamic drops the groups"):
        GSPOConfig(**base, **bad)


def test_console_step_line_shows_the_keep_rate():
    from gspo_trl.training.reporting.console_lines import step_line
    from tests.training.reporting._line_probes import line_probes

    logs = {"loss": 0.1, names.DYNAMIC_KEEP_RATE: 0.4, names.DYNAMIC_ROUNDS: 2.0}
    assert "kept 40% in 2.0 rounds" in step_line(logs, 5, 10, None, probes=line_probes())
    assert "kept" not in step_line({"loss": 0.1}, 5, 10, None, probes=line_probes())


def test_docs_table_lists_every_metric():
    text = (ROOT / "docs" / "dynamic-sampling.md").read_text()
    documented = set(re.findall(r"^\| `(gspo/dynamic/[a-z_]+)` \|", text, flags=re.M))
    assert documented == set(DYNAMIC_METRICS)
    assert all(names.is_metric_name(key) for key in DYNAMIC_METRICS)


def test_refill_stream_is_resumable():
    stream = RefillStream(10, seed=3)
    taken = stream.draw(7) + stream.draw(7)  # crosses into the second pass
    assert sorted(taken[:10]) == list(range(10))
    again = RefillStream(10, seed=3, drawn=7)
    assert again.draw(7) == taken[7:]
