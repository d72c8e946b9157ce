"""Routing diagnostics and replay (moe: routing_replay) in real GSPO runs of a tiny Qwen3-MoE on CPU.

The expert indices each sparse block actually used are read by the test itself, from forward
pre-hooks on transformers' `Qwen3MoeExperts` (its forward takes `top_k_index`), next to the row's
token ids from the input embedding: a row of an update forward is matched to the same row of
pi_old's forward by its tokens, so nothing here trusts the package's own bookkeeping, and a
routing that lost its rows in TRL's shuffle and split would show as a mismatch.
"""

from __future__ import annotations

import json
import math
import shutil

import numpy as np
import pytest
import torch
from PIL import Image

import gspo_trl.core.metric_names as names
from gspo_trl.core.errors import RecipeError
from gspo_trl.diagnose.routing_plot import plot_routing
from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe
from gspo_trl.training.probes.routing import ROUTED_EXPERTS
from tests._gspo_helpers import make_trainer, single_torch_thread, tiny_model_dir  # noqa: F401

pytestmark = pytest.mark.slow

SPEC = TinyMoeSpec(num_hidden_layers=2, hidden_size=64, moe_intermediate_size=64, num_attention_heads=2)


@pytest.fixture(scope="module")
def moe_dir(tmp_path_factory):
    return save_tiny_moe(tmp_path_factory.mktemp("moe") / "model", SPEC)


class ExpertsSeen:
    """Every forward's rows (token ids) and the expert indices each sparse block used for them."""

    def __init__(self, model: torch.nn.Module) -> None:
        self.forwards: list[dict] = []
        experts = [m for m in model.modules() if type(m).__name__ == "Qwen3MoeExperts"]
        assert len(experts) == SPEC.num_hidden_layers
        self.handles = [model.get_input_embeddings().register_forward_pre_hook(self._on_input)]
        for layer, module in enumerate(experts):
            self.handles.append(module.register_forward_pre_hook(self._experts_hook(layer)))

    def _on_input(self, module, args):
        self.forwards.append(
            {"ids": args[0].detach().clone(), "grad": torch.is_grad_enabled(), "experts": {}}
        )

    def _experts_hook(self, layer):
        def hook(module, args):
            ids = self.forwards[-1]["ids"]
            top_k = args[1].detach().view(ids.shape[0], ids.shape[1], -1)
            self.forwards[-1]["experts"].setdefault(layer, top_k.clone())  # a checkpoint rerun repeats it

        return hook

    def rows(self, grad: bool) -> dict[tuple, torch.Tensor]:
        """Token ids of a row -> its (layers, L, k) experts, over the forwards with(out) gradients."""
        out = {}
        for forward in self.forwards:
            if forward["grad"] != grad or len(forward["experts"]) != SPEC.num_hidden_layers:
                continue
            experts = torch.stack([forward["experts"][layer] for layer in range(SPEC.num_hidden_layers)], 1)
            for row, ids in enumerate(forward["ids"]):
                out[tuple(ids.tolist())] = experts[row]
        return out


def run(moe_dir, tmp_path, mode: str, learning_rate: float, **config):
    trainer = make_trainer(
        moe_dir,
        tmp_path / mode,
        trainer_kwargs={"moe": {"routing_replay": mode}},
        learning_rate=learning_rate,
        max_steps=4,  # one rollout batch of 32 completions, 4 minibatch updates
        **config,
    )
    seen = ExpertsSeen(trainer.model)
    trainer.train()
    logged = {}
    for event in trainer.state.log_history:
        logged.update({k: v for k, v in event.items() if k.startswith(names.GSPO)})
    return trainer, seen, logged


def flip_rate(key: str, logged: dict) -> float:
    return logged[names.under(key, names.FLIP_RATE)]


def test_flip_rate_is_exactly_zero_when_the_weights_do_not_change(moe_dir, tmp_path):
    # learning_rate must be > 0: 1e-30 x AdamW's unit-size step leaves every weight within 1e-29
    trainer, seen, logged = run(moe_dir, tmp_path, "off", learning_rate=1e-30)
    before = type(trainer.model).from_pretrained(moe_dir).state_dict()
    assert max(float((before[k] - v).abs().max()) for k, v in trainer.model.state_dict().items()) < 1e-29
    for minibatch in range(1, 5):
        assert flip_rate(names.minibatch(minibatch), logged) == 0.0
        assert logged[names.under(names.minibatch(minibatch), names.log_ratio("max"))] == 0.0
    old, updates = seen.rows(grad=False), seen.rows(grad=True)
    assert len(updates) == 32 and set(updates) <= set(old)


def test_without_replay_routing_moves_and_the_logged_flip_rate_is_what_the_experts_saw(moe_dir, tmp_path):
    trainer, seen, logged = run(moe_dir, tmp_path, "off", learning_rate=5e-2)
    assert flip_rate(names.minibatch(1), logged) == 0.0
    assert flip_rate(names.OFFPOLICY, logged) > 0.0
    # the test's own count over the last minibatch's response tokens, from the experts' inputs
    old, updates = seen.rows(grad=False), seen.forwards
    last = [f for f in updates if f["grad"]][-1]
    width = trainer.args.max_completion_length
    flips = pairs = 0
    for row, ids in enumerate(last["ids"]):
        before = old[tuple(ids.tolist())]
        eos = (ids[-width:] == trainer.processing_class.eos_token_id).nonzero()
        end = int(eos[0]) + 1 if eos.numel() else width  # TRL's completion mask: up to the first EOS
        for layer in range(SPEC.num_hidden_layers):  # the positions that score response tokens 0..end-1
            now = last["experts"][layer][row, -width - 1 : -1][:end].sort(-1).values
            then = before[layer, -width - 1 : -1][:end].sort(-1).values
            flips += int((now != then).any(-1).sum())
            pairs += end
    assert flips > 0
    assert math.isclose(flip_rate(names.minibatch(4), logged), flips / pairs, rel_tol=1e-6)  # float32
    # `gspo-trl report` draws it: routing.png, a real plot (a dense run gets none: test_report)
    png = tmp_path / "routing.png"
    assert plot_routing(trainer.state.log_history, png) is True
    with Image.open(png) as image:
        assert image.size == (1000, 800) and np.asarray(image.convert("L")).std() > 10


def test_replay_old_hands_every_update_pi_olds_experts_per_token_and_layer(moe_dir, tmp_path):
    _, seen, logged = run(moe_dir, tmp_path, "old", learning_rate=5e-2)
    old, updates = seen.rows(grad=False), seen.rows(grad=True)
    assert len(updates) == 32
    assert [k for k in updates] != [k for k in old if k in updates]  # TRL shuffled the rows
    for ids, experts in updates.items():  # per row, token and layer: pi_old's experts, in order
        assert torch.equal(experts, old[ids])
    assert logged[names.under(names.minibatch(1), names.log_ratio("min"))] == 0.0
    assert logged[names.under(names.minibatch(1), names.log_ratio("max"))] == 0.0
    assert flip_rate(names.OFFPOLICY, logged) > 0.0  # the routers' own choice moved; replay hid it


def test_replay_old_gives_the_router_a_gradient_through_the_gate_weights(moe_dir, tmp_path):
    trainer = make_trainer(
        moe_dir,
        tmp_path / "grad",
        trainer_kwargs={"moe": {"routing_replay": "old"}},
        learning_rate=1e-2,
        max_steps=2,
        router_aux_loss_coef=0.0,  # no load-balancing loss: the gate weights are the only path
    )
    routers = [m for m in trainer.model.modules() if type(m).__name__ == "Qwen3MoeTopKRouter"]
    norms: list[float] = []
    for router in routers:
        router.weight.register_post_accumulate_grad_hook(lambda p: norms.append(float(p.grad.norm())))
    seen_key = []
    original = trainer._compute_loss

    def compute_loss(model, inputs):
        seen_key.append(ROUTED_EXPERTS in inputs)
        return original(model, inputs)

    trainer._compute_loss = compute_loss
    trainer.train()
    assert seen_key == [True, True]
    assert len(norms) == 2 * len(routers) and all(n > 0 for n in norms)


def test_a_dense_model_refuses_routing_replay(tmp_path):
    with pytest.raises(RecipeError, match=r"moe.routing_replay: old: .*no mixture-of-experts router"):
        make_trainer(
            tiny_model_dir(tmp_path), tmp_path / "dense", trainer_kwargs={"moe": {"routing_replay": "old"}}
        )


def test_a_moe_saved_by_trls_sft_with_router_logits_on_trains_and_keeps_its_aux_loss(moe_dir, tmp_path):
    """TRL's SFTTrainer saves `output_router_logits: true` (a warm-started MoE has it); HF generate
    then failed on its first rollout (load-balancing loss of one token against the whole mask)."""
    sft_saved = tmp_path / "sft-saved"
    shutil.copytree(moe_dir, sft_saved)
    config = json.loads((sft_saved / "config.json").read_text())
    (sft_saved / "config.json").write_text(json.dumps({**config, "output_router_logits": True}))
    trainer = make_trainer(sft_saved, tmp_path / "out", max_steps=2)
    trainer.train()
    assert any("aux_loss" in event for event in trainer.state.log_history)
