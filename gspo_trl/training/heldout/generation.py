"""Which engine writes the held-out completions during training, and which rows each rank takes.

Held-out generation runs at the start, every N steps and at the end of training, so it must
neither OOM nor cost hours. Two engines:
- the run's own colocated vLLM engine (TRL's `trainer.vllm_generation.llm`), weights synced
  from the policy first, as TRL does before a rollout;
- Hugging Face `generate` otherwise (vLLM server mode included: the server belongs to the
  rollouts), with the model unwrapped the way TRL unwraps it for generation (ZeRO-3 weights
  gathered once, not per decode step) and batches bounded by a token budget.

Each rank generates a disjoint share of the rows (`shard_rows`) when its generation needs
no other rank: vLLM colocate (per tensor-parallel group), DDP, single process, and ZeRO-3
with `ds3_gather_for_generation`. FSDP and ZeRO-3 without the gather run every forward as a
collective, so there every rank generates every row in lockstep (`synced_gpus`).
"""

from __future__ import annotations

import contextlib
import logging
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from typing import Any

from gspo_trl.eval.generation import DEFAULT_BATCH_TOKENS, generate_completions
from gspo_trl.training.heldout.layout import forward_is_collective, heldout_layout, shard_rows

__all__ = ["HeldoutGenerator", "HeldoutSampling", "heldout_generator", "shard_rows"]
from gspo_trl.model.prompts import PromptRendering, prompt_token_ids

logger = logging.getLogger(__name__)

Generate = Callable[[Sequence[Any], int, float], list[list[str]]]
"""(prompts, n, temperature) -> n completions per prompt; temperature 0 = greedy."""


@dataclass(frozen=True)
class HeldoutSampling:
    """The recipe's sampling settings for held-out completions (top_k 0: off)."""

    max_new_tokens: int
    top_p: float = 1.0
    top_k: int = 0
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS


@dataclass(frozen=True)
class HeldoutGenerator:
    """A generate function and this rank's share of the rows: shard `shard_index` of `num_shards`."""

    generate: Generate
    engine: str
    shard_index: int = 0
    num_shards: int = 1


def _colocated_vllm(trainer: Any, sampling: HeldoutSampling) -> HeldoutGenerator | None:
    engine = getattr(trainer, "vllm_generation", None)
    if engine is None or getattr(engine, "mode", None) != "colocate":
        return None
    accelerator, tokenizer = trainer.accelerator, trainer.processing_class
    tensor_parallel = getattr(engine, "tensor_parallel_size", 1)

    # Every rank syncs here, before any rank knows whether its share is empty: under ZeRO-3
    # or FSDP the sync gathers the weights collectively. TRL's rollout reads the same step mark.
    trainer.sync_engine_weights()

    def generate(prompts: Sequence[Any], n: int, temperature: float) -> list[list[str]]:
        from vllm import SamplingParams

        rendering = PromptRendering.of_trainer(trainer)
        inputs = [{"prompt_token_ids": ids} for ids in prompt_token_ids(tokenizer, prompts, rendering)]
        params = SamplingParams(
            n=n,
            temperature=temperature,
            top_p=sampling.top_p if temperature > 0 else 1.0,
            top_k=sampling.top_k if temperature > 0 and sampling.top_k else -1,
            max_tokens=sampling.max_new_tokens,
        )
        outputs = engine.llm.generate(inputs, sampling_params=params, use_tqdm=False)
        return [[choice.text for choice in output.outputs] for output in outputs]

    # Ranks of one tensor-parallel group must call generate with the same prompts.
    layout = heldout_layout(True, tensor_parallel, accelerator.num_processes, False)
    return HeldoutGenerator(
        generate, layout.engine, accelerator.process_index // tensor_parallel, layout.num_shards
    )


def _forward_is_collective(trainer: Any) -> bool:
    """True when a forward pass on one rank needs the others (sharded weights gathered per layer)."""
    from trl.distributed import DistributedBackend

    backend = DistributedBackend(trainer.accelerator)
    return forward_is_collective(backend.is_fsdp, backend.is_zero3, trainer.args.ds3_gather_for_generation)


@contextlib.contextmanager
def heldout_generator(trainer: Any, sampling: HeldoutSampling) -> Iterator[HeldoutGenerator]:
    """The engine for this evaluation, usable inside the `with` block (weights gathered there)."""
    colocated = _colocated_vllm(trainer, sampling)
    if colocated is not None:
        engine = trainer.vllm_generation
        # Sleep mode: awake (weights synced above, KV cache here) for the whole evaluation, so
        # the score and pass@k passes see the same weights; asleep again after, as TRL leaves it.
        if engine.enable_sleep_mode:
            engine.llm.wake_up(tags=["kv_cache"])
        try:
            yield colocated
        finally:
            if engine.enable_sleep_mode:
                trainer.put_engine_to_sleep()
        return
    from trl.models.utils import unwrap_model_for_generation

    accelerator = trainer.accelerator
    layout = heldout_layout(False, 1, accelerator.num_processes, _forward_is_collective(trainer))
    lockstep = layout.lockstep
    with unwrap_model_for_generation(
        trainer.model_wrapped,
        accelerator,
        gather_deepspeed3_params=trainer.args.ds3_gather_for_generation,
        gradient_checkpointing_kwargs=trainer.args.gradient_checkpointing_kwargs,
    ) as model:

        def generate(prompts: Sequence[Any], n: int, temperature: float) -> list[list[str]]:
            return generate_completions(
                model,
                trainer.processing_class,
                prompts,
                sampling.max_new_tokens,
                temperature,
                n,
                top_p=sampling.top_p,
                top_k=sampling.top_k,
                max_batch_tokens=sampling.max_batch_tokens,
                synced_gpus=lockstep,
                rendering=PromptRendering.of_trainer(trainer),
            )

        shard = 0 if lockstep else accelerator.process_index
        yield HeldoutGenerator(generate, layout.engine, shard, layout.num_shards)
