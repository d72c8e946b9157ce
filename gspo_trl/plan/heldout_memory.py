"""What one held-out evaluation costs on a training GPU, from the rules the run itself uses.

The engine and the row shards come from gspo_trl.training.heldout.layout (what
heldout_generation picks at run time), the samples per row from its `heldout_passes` (what
HeldoutCallback generates), and an HF generate batch from gspo_trl.eval.batching (the
`heldout.max_batch_tokens` bound generate_completions applies):
- colocated vLLM: the evaluation runs inside the engine's own reservation (the `vLLM colocate`
  term), awake beside the model state, so its peak is the rollout phase's;
- HF generate: one batch's KV cache (gspo_trl.plan.generation_memory) beside the model state,
  plus, under ZeRO-3 with `ds3_gather_for_generation`, the whole bf16 model gathered on each rank.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from gspo_trl.config.recipe import Recipe
from gspo_trl.config.trl_fields import grpo_default
from gspo_trl.eval.batching import DEFAULT_BATCH_SIZE, token_bounded_batches
from gspo_trl.plan.generation_memory import hf_kv_bytes_per_token
from gspo_trl.plan.planner import Plan
from gspo_trl.training.heldout.layout import (
    VLLM_COLOCATE,
    forward_is_collective,
    heldout_layout,
    heldout_passes,
)


@dataclass(frozen=True)
class HeldoutLoad:
    """One held-out evaluation on the busiest rank."""

    engine: str
    num_shards: int
    rows: int
    rows_known: bool
    score_samples: int
    sampled_samples: int
    max_completion_length: int
    evaluations: int | None
    batch_rows: int | None
    """Rows per HF generate batch (None: vLLM schedules its own)."""
    max_batch_tokens: int
    kv_peak_bytes: int
    gathered_weight_bytes: int
    peak_bytes: int

    @property
    def rows_per_shard(self) -> int:
        """The largest shard (gspo_trl.training.heldout.layout.shard_rows: sizes differ by <= 1)."""
        return math.ceil(self.rows / self.num_shards)

    @property
    def samples(self) -> int:
        return self.score_samples + self.sampled_samples

    @property
    def tokens(self) -> int:
        """Generated tokens per evaluation on the busiest rank, at the maximal length."""
        return self.rows_per_shard * self.samples * self.max_completion_length


def _evaluations(recipe: Recipe, every_steps: int) -> int | None:
    """Before training, every `every_steps` before the last step, and at the end."""
    max_steps = int(recipe.training.get("max_steps") or -1)
    if max_steps <= 0:
        return None
    return 2 + ((max_steps - 1) // every_steps if every_steps else 0)


def heldout_load(recipe: Recipe, result: Plan) -> HeldoutLoad | None:
    """Rows, samples and peak memory of one held-out evaluation; None without `heldout:`."""
    section = recipe.heldout
    if section is None:
        return None
    setup, shape = result.setup, result.shape
    eval_size = recipe.data.eval_size
    rows_known = recipe.data.eval_split is None and eval_size >= 1
    rows = min(section.max_rows, int(eval_size)) if rows_known else section.max_rows
    temperature = section.temperature
    if temperature is None:
        temperature = float(recipe.training.get("temperature", grpo_default("temperature")))
    score, sampled = heldout_passes(temperature, section.num_samples, section.k, section.sample_temperature)
    gather = bool(recipe.training.get("ds3_gather_for_generation", grpo_default("ds3_gather_for_generation")))
    collective = forward_is_collective(setup.strategy == "fsdp2", setup.strategy == "zero3", gather)
    layout = heldout_layout(
        setup.colocated_vllm, setup.vllm_tensor_parallel_size, setup.world_size, collective
    )
    state = sum(t.bytes for t in result.terms if t.phase == "state")
    load = {
        "engine": layout.engine,
        "num_shards": layout.num_shards,
        "rows": rows,
        "rows_known": rows_known,
        "score_samples": score[0],
        "sampled_samples": sampled[0] if sampled else 0,
        "max_completion_length": setup.max_completion_length,
        "evaluations": _evaluations(recipe, section.every_steps),
        "max_batch_tokens": section.max_batch_tokens,
    }
    if layout.engine == VLLM_COLOCATE:  # its reservation, unless already counted as state
        reserved = sum(t.bytes for t in result.terms if t.name.startswith("vLLM") and t.phase != "state")
        return HeldoutLoad(
            **load, batch_rows=None, kv_peak_bytes=0, gathered_weight_bytes=0, peak_bytes=state + reserved
        )
    shard_rows = math.ceil(rows / layout.num_shards)
    lengths = [setup.max_prompt_length] * shard_rows
    batches = token_bounded_batches(
        lengths, setup.max_completion_length, section.max_batch_tokens, DEFAULT_BATCH_SIZE
    )
    batch_rows = max((len(batch) for batch in batches), default=0)
    kv = batch_rows * setup.sequence_length * hf_kv_bytes_per_token(shape, setup)
    gathered = 0
    if setup.strategy == "zero3" and gather:
        gathered = (
            shape.total_params * setup.forward_weight_bytes * (setup.world_size - 1) // setup.world_size
        )
    return HeldoutLoad(
        **load,
        batch_rows=batch_rows,
        kv_peak_bytes=kv,
        gathered_weight_bytes=gathered,
        peak_bytes=state + kv + gathered,
    )
