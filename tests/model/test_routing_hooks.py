"""Routing capture and replay (gspo_trl.model.routing) on real forwards of both router families.

A tiny Qwen3-MoE (with and without `norm_topk_prob`) and a tiny Mixtral are built from their
transformers configs with random weights (no tokenizer, no files). The checks that matter per
family: replaying a model's own recorded routing reproduces its forward to float precision (so
the family's `scores_at` is the gate computation its router does), and replaying another
model's routing changes the output, counts the flips, and still trains the router.
"""

from __future__ import annotations

import copy

import pytest
import torch
from transformers import MixtralConfig, MixtralForCausalLM, Qwen3MoeConfig, Qwen3MoeForCausalLM

from gspo_trl.model.routing.families import find_routers, supported_routers
from gspo_trl.model.routing.hooks import RoutingHooks, routing_dtype, top_k_sets_differ

LAYERS, EXPERTS, TOP_K, VOCAB = 3, 8, 2, 64
SHAPE = dict(
    vocab_size=VOCAB,
    hidden_size=32,
    intermediate_size=32,
    num_hidden_layers=LAYERS,
    num_attention_heads=2,
    num_key_value_heads=1,
    head_dim=16,
    num_experts_per_tok=TOP_K,
    max_position_embeddings=64,
)


def qwen3_moe(norm_topk_prob: bool = True) -> torch.nn.Module:
    config = Qwen3MoeConfig(
        **SHAPE, moe_intermediate_size=32, num_experts=EXPERTS, norm_topk_prob=norm_topk_prob
    )
    return Qwen3MoeForCausalLM(config)


def mixtral() -> torch.nn.Module:
    return MixtralForCausalLM(MixtralConfig(**SHAPE, num_local_experts=EXPERTS))


MODELS = {
    "qwen3_moe": (qwen3_moe, "qwen3_moe", "Qwen3MoeTopKRouter"),
    "qwen3_moe-unnormalised": (lambda: qwen3_moe(norm_topk_prob=False), "qwen3_moe", "Qwen3MoeTopKRouter"),
    "mixtral": (mixtral, "mixtral", "MixtralTopKRouter"),
}


@pytest.fixture(params=sorted(MODELS))
def model(request) -> tuple[torch.nn.Module, str, str]:
    build, family, router_class = MODELS[request.param]
    torch.manual_seed(0)
    built = build().eval()
    return built, family, router_class


def _ids(rows: int = 4, length: int = 12, seed: int = 1) -> torch.Tensor:
    return torch.randint(0, VOCAB, (rows, length), generator=torch.Generator().manual_seed(seed))


def _record(model: torch.nn.Module, ids: torch.Tensor) -> tuple[torch.Tensor, torch.Tensor]:
    """(logits, routing) of one recorded forward."""
    hooks = RoutingHooks(model)
    hooks.begin(record=True)
    with torch.no_grad():
        logits = model(input_ids=ids).logits
    routing = hooks.end().routing()
    hooks.remove()
    return logits, routing


def test_every_router_is_found_in_layer_order(model) -> None:
    model, family, router_class = model
    sites = find_routers(model)
    assert [s.layer for s in sites] == list(range(LAYERS))
    assert {s.family.name for s in sites} == {family}
    assert {type(s.module).__name__ for s in sites} == {router_class}
    assert router_class in supported_routers()
    assert [s.path for s in sites] == sorted(s.path for s in sites)


def test_recording_is_the_routers_own_top_k(model) -> None:
    """The recorded experts are the top-k of the router's own softmax, per row, layer and position."""
    model, _, _ = model
    ids = _ids()
    seen = {}
    handles = [
        site.module.register_forward_hook(lambda m, a, out, layer=site.layer: seen.__setitem__(layer, out[0]))
        for site in find_routers(model)
    ]
    _, routing = _record(model, ids)
    for handle in handles:
        handle.remove()
    assert routing.shape == (4, LAYERS, 12, TOP_K) and routing.dtype == routing_dtype(EXPERTS) == torch.uint8
    for layer, logits in seen.items():
        expected = logits.float().softmax(-1).topk(TOP_K, dim=-1).indices.view(4, 12, TOP_K)
        assert not top_k_sets_differ(routing[:, layer].reshape(-1, TOP_K), expected.reshape(-1, TOP_K)).any()


def test_replaying_the_models_own_routing_reproduces_its_forward(model) -> None:
    """The family's scores_at is its router's gate computation: same experts, same output, no flips."""
    model, _, _ = model
    ids = _ids()
    free, routing = _record(model, ids)
    hooks = RoutingHooks(model)
    hooks.begin(reference=routing, replay=True)
    with torch.no_grad():
        replayed = model(input_ids=ids).logits
    finished = hooks.end()
    assert finished.flips.shape == (4, LAYERS, 12) and not finished.flips.any()
    torch.testing.assert_close(replayed, free, rtol=1e-5, atol=1e-5)


def test_chunked_record_equals_one_pass(model) -> None:
    """A pass may be several forwards of consecutive rows (TRL's chunked log-prob pass)."""
    model, _, _ = model
    ids = _ids()
    _, whole = _record(model, ids)
    hooks = RoutingHooks(model)
    hooks.begin(record=True)
    with torch.no_grad():
        for chunk in ids.split(1):
            model(input_ids=chunk)
    assert torch.equal(hooks.end().routing(), whole)


def test_replaying_another_routing_changes_the_output_and_trains_the_router(model) -> None:
    model, _, _ = model
    ids = _ids()
    other = copy.deepcopy(model)
    with torch.no_grad():
        for site in find_routers(other):
            site.module.weight.mul_(-1.0)  # the opposite preferences: most top-k sets change
    _, reference = _record(other, ids)
    free, own = _record(model, ids)
    differs = top_k_sets_differ(own.reshape(-1, TOP_K), reference.reshape(-1, TOP_K)).view(4, LAYERS, 12)
    assert differs.any()

    hooks = RoutingHooks(model)
    hooks.begin(reference=reference, replay=True)
    logits = model(input_ids=ids).logits
    finished = hooks.end()
    assert torch.equal(finished.flips, differs)  # a flip: the router's own set is not the replayed one
    assert not torch.allclose(logits, free)
    logits.float().logsumexp(-1).mean().backward()
    for site in find_routers(model):
        assert site.module.weight.grad is not None and site.module.weight.grad.abs().sum() > 0, site.path


def test_a_routing_of_the_wrong_shape_is_refused(model) -> None:
    model, _, _ = model
    hooks = RoutingHooks(model)
    with pytest.raises(ValueError, match=f"{LAYERS} routers of top-{TOP_K}"):
        hooks.begin(reference=torch.zeros(4, LAYERS + 1, 12, TOP_K, dtype=torch.long), replay=True)
    hooks.begin(reference=torch.zeros(2, LAYERS, 12, TOP_K, dtype=torch.long))
    with pytest.raises(RuntimeError, match="reordered"), torch.no_grad():
        model(input_ids=_ids(rows=3))


def test_a_second_chunk_with_gradients_is_refused(model) -> None:
    """Gradient checkpointing would rerun layers after the last chunk: one forward per update."""
    model, _, _ = model
    hooks = RoutingHooks(model)
    hooks.begin(record=True)
    model(input_ids=_ids(rows=1))
    with pytest.raises(RuntimeError, match="second chunk"):
        model(input_ids=_ids(rows=1, seed=2))


def test_a_dense_model_has_no_routers() -> None:
    from transformers import Qwen3Config, Qwen3ForCausalLM

    dense = Qwen3ForCausalLM(Qwen3Config(**{k: v for k, v in SHAPE.items() if k != "num_experts_per_tok"}))
    assert find_routers(dense) == []
    with pytest.raises(ValueError, match="no router"):
        RoutingHooks(dense)
