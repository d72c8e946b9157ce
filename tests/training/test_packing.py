"""`packing: true` against TRL's padded forward, in real GSPOTrainer calls on the tiny model (fp32, CPU).

The padded trainer is TRL's own `_get_per_token_logps_and_entropies`; the packed one runs the same
fused-head model call on the rows' real tokens only (gspo_trl.training.probes.packing). Both are
built from the same checkpoint and seed, so every difference is packing's: the log-probs, the
loss and every gradient agree to float rounding, and a seeded run logs the same metrics.
"""

from __future__ import annotations

import json
import math

import pytest
import torch

import gspo_trl.core.metric_names as names
import gspo_trl.training.probes.packing as packing_probe
from gspo_trl.model.sizing.flops import update_flops
from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe
from gspo_trl.training.packed_rows import bins_by_first_fit, pack_rows, unpack
from gspo_trl.training.probes.base import LossCall
from gspo_trl.training.probes.perf import PerfProbe
from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir  # noqa: F401

PAD = 0
SKEWED_PROMPTS = [("the " * (i % 8) * 3) + f"add {i} and {i + 3}" for i in range(64)]
"""Prompts of 4 to 25 words: rows whose padding packing can leave out."""
MOE_SPEC = TinyMoeSpec(num_hidden_layers=2, hidden_size=64, moe_intermediate_size=64, num_attention_heads=2)


def compared(key: str, value: object) -> bool:
    """A logged number that packing must not change: not a timing or a rate."""
    timing = key.startswith("perf/") or "time" in key or "per_second" in key
    return isinstance(value, float) and not timing


def skewed_batch(vocab: int, seed: int = 0) -> dict[str, torch.Tensor]:
    """Eight rows: prompts of 2-9 tokens (left-padded), completions of 1-24 (right-padded), one
    completion at the full width, as TRL lays out a minibatch; advantages of both signs and a
    pi_old a little off the current policy, so the clip and the ratio both act."""
    g = torch.Generator().manual_seed(seed)
    prompt_lengths, completion_lengths = [2, 9, 5, 3, 7, 4, 6, 8], [1, 24, 3, 5, 2, 17, 4, 9]
    rows, prompt_width, width = len(prompt_lengths), max(prompt_lengths), max(completion_lengths)
    prompt_ids = torch.full((rows, prompt_width), PAD)
    prompt_mask = torch.zeros(rows, prompt_width, dtype=torch.long)
    completion_ids = torch.full((rows, width), PAD)
    completion_mask = torch.zeros(rows, width, dtype=torch.long)
    for row, (p, c) in enumerate(zip(prompt_lengths, completion_lengths, strict=True)):
        prompt_ids[row, prompt_width - p :] = torch.randint(3, vocab, (p,), generator=g)
        prompt_mask[row, prompt_width - p :] = 1
        completion_ids[row, :c] = torch.randint(3, vocab, (c,), generator=g)
        completion_mask[row, :c] = 1
    return {
        "prompt_ids": prompt_ids,
        "prompt_mask": prompt_mask,
        "completion_ids": completion_ids,
        "completion_mask": completion_mask,
        "advantages": torch.randn(rows, generator=g),
    }


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory):
    return tiny_model_dir(tmp_path_factory.mktemp("packing"))


@pytest.fixture(scope="module")
def trainers(model_dir, tmp_path_factory):
    root = tmp_path_factory.mktemp("pair")
    return [make_trainer(model_dir, root / str(on), packing=on) for on in (False, True)]


def test_first_fit_bins_respect_the_budget_and_keep_every_row_once():
    lengths = [7, 3, 9, 1, 4, 4, 2, 8]
    bins = bins_by_first_fit(lengths, budget=10)
    assert sorted(r for b in bins for r in b) == list(range(8))
    assert all(sum(lengths[r] for r in b) <= 10 for b in bins)
    assert len(bins) == 4  # 38 tokens in bins of 10


def test_pack_then_unpack_is_the_identity_on_real_tokens_and_zero_on_padding():
    batch = skewed_batch(vocab=50)
    ids = torch.cat([batch["prompt_ids"], batch["completion_ids"]], dim=1)
    mask = torch.cat([batch["prompt_mask"], batch["completion_mask"]], dim=1)
    layout = pack_rows(ids, mask, budget=ids.size(1))
    assert layout.tokens == int(mask.sum()) and layout.shape[0] < ids.size(0)
    assert layout.shape[1] <= ids.size(1)
    assert torch.equal(unpack(layout.input_ids, layout), ids * mask)
    positions = unpack(layout.position_ids, layout)  # each row counts 0, 1, ... from its first token
    assert torch.equal(positions, (mask.cumsum(1) - 1).clamp(min=0) * mask)


def test_packed_log_probs_loss_and_gradients_equal_the_padded_ones(trainers):
    vocab = trainers[0].model.config.vocab_size
    batch = skewed_batch(vocab)
    logps = [t.plain_logprobs(t.model, batch) for t in trainers]
    mask = batch["completion_mask"].bool()
    assert torch.equal(logps[1][~mask], torch.zeros_like(logps[1][~mask]))  # TRL's zeros at padding
    assert (logps[0] - logps[1]).abs().max() < 1e-5
    old = logps[0].detach() + 0.05 * torch.randn(logps[0].shape, generator=torch.Generator().manual_seed(1))
    grads, losses = [], []
    for trainer in trainers:
        trainer.model.zero_grad()
        loss = trainer.compute_loss(trainer.model, {**batch, "old_per_token_logps": old * mask})
        loss.backward()
        losses.append(float(loss.detach()))
        grads.append({n: p.grad.clone() for n, p in trainer.model.named_parameters() if p.grad is not None})
        trainer.model.zero_grad()
    assert losses[0] != 0 and math.isclose(losses[0], losses[1], rel_tol=1e-5, abs_tol=1e-7)
    assert grads[0].keys() == grads[1].keys() and len(grads[0]) > 10
    for name, grad in grads[0].items():
        scale = float(grad.abs().max()) + 1e-12
        assert float((grad - grads[1][name]).abs().max()) / scale < 1e-4, name


def test_mfu_counts_each_rows_own_tokens_when_packed(trainers):
    """perf/update_flops (and so perf/mfu): the padded rectangle without packing, each row's own
    prompt and completion tokens with it (on main both counted the rectangle)."""
    batch = skewed_batch(trainers[0].model.config.vocab_size)
    counted = []
    for trainer in trainers:
        perf = trainer.probes.find(PerfProbe)
        before = perf.meter.update_flops
        perf.on_loss_inputs(trainer, LossCall(dict(batch), batch, True, 1, True))
        counted.append(perf.meter.update_flops - before)
    meter = trainers[0].probes.find(PerfProbe).meter
    shape, checkpointing = meter.shape, meter.gradient_checkpointing
    lengths = (batch["prompt_mask"].sum(1) + batch["completion_mask"].sum(1)).tolist()
    width = batch["prompt_ids"].shape[1] + batch["completion_ids"].shape[1]
    assert counted[0] == update_flops(shape, len(lengths), width, checkpointing)
    assert counted[1] == pytest.approx(sum(update_flops(shape, 1, n, checkpointing) for n in lengths))
    assert counted[1] < 0.6 * counted[0]  # 109 of the 264 tokens are real


def test_a_seeded_run_logs_the_same_metrics_packed_and_padded(model_dir, tmp_path):
    logs = []
    for on in (False, True):
        trainer = make_trainer(model_dir, tmp_path / str(on), prompts=SKEWED_PROMPTS, packing=on, max_steps=4)
        trainer.train()
        lines = (tmp_path / str(on) / "metrics.jsonl").read_text().splitlines()
        logs.append([json.loads(line) for line in lines])
    padded, packed = logs
    assert len(padded) == len(packed) >= 4
    checked, fractions = 0, []
    for a, b in zip(padded, packed, strict=True):
        fractions += [b.pop("perf/packed_fraction")] if "perf/packed_fraction" in b else []
        if "perf/update_flops" in a:  # the FLOPs of the rows' own tokens: fewer than the rectangle's
            assert b["perf/update_flops"] < a["perf/update_flops"]
        assert a.keys() == b.keys()
        for key, value in a.items():
            if not compared(key, value):
                continue
            assert math.isclose(value, b[key], rel_tol=1e-3, abs_tol=1e-5), (key, value, b[key])
            checked += 1
    assert checked > 40
    assert 0 < min(fractions) < 1 and max(fractions) <= 1  # packing left padding out, never added any


@pytest.mark.slow
@pytest.mark.parametrize("replay", ["old"])
def test_moe_routing_follows_each_row_into_its_packed_position(tmp_path, monkeypatch, replay):
    """pi_old's experts recorded from a packed forward, compared (and with replay forced) in packed
    updates: on-policy no token flips, while the router does move off-policy."""
    monkeypatch.setattr(packing_probe, "MAX_PACKED_SHARE", 1.0)  # every chunk packed
    moe_dir = save_tiny_moe(tmp_path / "moe", MOE_SPEC)
    trainer = make_trainer(
        moe_dir,
        tmp_path / replay,
        prompts=SKEWED_PROMPTS,
        packing=True,
        learning_rate=5e-2,
        trainer_kwargs={"moe": {"routing_replay": replay}},
    )
    trainer.train()
    logged = {}
    for event in trainer.state.log_history:
        logged.update(event)
    on_policy = names.minibatch(1)
    assert logged[names.under(on_policy, names.FLIP_RATE)] == 0.0
    assert logged[names.under(names.OFFPOLICY, names.FLIP_RATE)] > 0.0  # the router did move
    assert logged["perf/packed_fraction"] < 1
