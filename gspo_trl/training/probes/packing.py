"""`packing: true`: pi_old's, the reference model's and the updates' forwards without padding.

TRL runs `_get_per_token_logps_and_entropies` on the padded (B, P + C) rectangle. This probe runs
the same model call, TRL's own with its labels, on the rows' real tokens only, packed into few
sequences (gspo_trl.training.packed_rows) with position ids restarting per row and no attention
mask, so transformers keeps attention inside each row. The log-probs and entropies come back in
TRL's (B, C) layout, zeros where TRL's are zeros, so TRL's loss, GSPO's per-response mean and
every probe read what they read without packing.

Sequences hold at most the padded width under SDPA or eager attention (their packed mask is
dense); flash attention, and a run with TRL's MoE load-balancing loss, get one sequence. The
transformers and TRL lines this rests on, the measurements and when to turn it on:
docs/performance.md ("Packing: forwards without padding").
"""

from __future__ import annotations

from typing import Any

import torch
import torch.nn.functional as F

import gspo_trl.core.metric_names as names
from gspo_trl.training.packed_rows import PackedLayout, pack_rows, packed_tokens, to_packed, unpack
from gspo_trl.training.probes.base import LogprobOutput, Probe
from gspo_trl.training.probes.routing import RoutingProbe

MULTIMODAL_KEYS = (
    "pixel_values",
    "image_grid_thw",
    "pixel_attention_mask",
    "spatial_shapes",
    "num_tiles",
    "image_sizes",
    "token_type_ids",
    "mm_token_type_ids",
    "image_position_ids",
)
"""TRL's per-row image inputs: packing refuses them (they are indexed by padded row)."""


MAX_PACKED_SHARE = 0.9
"""A chunk whose packing would still run over 90% of the padded rectangle's tokens runs padded:
the packed attention mask costs more to build than so little padding (the demo's task, rows of
15-23 tokens in a width of 23: +6% per forward and backward, measured on this CPU)."""


def one_sequence(model: Any) -> bool:
    """Flash attention packs into one sequence (its varlen kernel needs batch size 1). `model` may be
    wrapped (DDP, DeepSpeed: `.module`); not `accelerator.unwrap_model`, 5 ms a call on this CPU."""
    config = getattr(model, "config", None) or getattr(getattr(model, "module", None), "config", None)
    return "flash" in str(getattr(config, "_attn_implementation", "") or "")


class PackingProbe(Probe):
    """Runs TRL's log-prob forwards packed; counts the tokens forwarded (`perf/packed_fraction`)."""

    def __init__(self, widths: int | None = 1) -> None:
        self.widths = widths
        """Each packed sequence holds at most this many padded widths (None: one sequence)."""
        self.packed_tokens = 0
        self.padded_tokens = 0

    def forward(
        self,
        trainer: Any,
        model: Any,
        input_ids: torch.Tensor,
        attention_mask: torch.Tensor,
        logits_to_keep: int,
        batch_size: int | None = None,
        compute_entropy: bool = False,
        compute_aux_loss: bool = False,
        num_images: Any = None,
        **multimodal: Any,
    ) -> LogprobOutput:
        """TRL's `_get_per_token_logps_and_entropies(model, input_ids, attention_mask,
        logits_to_keep, batch_size, compute_entropy, compute_aux_loss, ...)`, packed: the same
        chunks of `batch_size` rows, each one packed forward."""
        given = [k for k, v in multimodal.items() if v is not None] + (["num_images"] if num_images else [])
        if given:
            raise ValueError(
                f"packing: true runs text rows only; this batch has {', '.join(given)}: set packing: false"
            )
        single = one_sequence(model) or compute_aux_loss or self.widths is None
        routing = trainer.probes.find(RoutingProbe)
        hooks = getattr(routing and routing.routing, "hooks", None)
        batch_size = batch_size or input_ids.size(0)
        logps, entropies, aux_losses = [], [], []
        for start in range(0, input_ids.size(0), batch_size):
            ids, mask = input_ids[start : start + batch_size], attention_mask[start : start + batch_size]
            budget = None if single else self.widths * ids.size(1)
            forwarded = packed_tokens(mask.sum(dim=1).tolist(), budget)
            layout = None  # too little padding to leave out: TRL's padded call
            if forwarded <= MAX_PACKED_SHARE * ids.numel():
                layout = pack_rows(ids, mask, budget)
            self.packed_tokens += ids.numel() if layout is None else forwarded
            self.padded_tokens += ids.numel()
            if hooks is not None:
                hooks.packed(layout)
            outputs = self._model_call(trainer, model, ids, mask, logits_to_keep, layout, compute_aux_loss)
            logps.append(_padded(outputs.log_probs, layout, logits_to_keep))
            if compute_entropy:
                entropies.append(_padded(outputs.entropy, layout, logits_to_keep))
            if compute_aux_loss:
                aux_losses.append(outputs.aux_loss)
        return (
            torch.cat(logps, dim=0),
            torch.cat(entropies, dim=0) if compute_entropy else None,
            torch.stack(aux_losses).mean() if compute_aux_loss else None,
        )

    @staticmethod
    def _model_call(
        trainer: Any,
        model: Any,
        ids: torch.Tensor,
        mask: torch.Tensor,
        logits_to_keep: int,
        layout: PackedLayout | None,
        compute_aux_loss: bool,
    ) -> Any:
        labels = ids.masked_fill(mask == 0, -100)
        labels[:, :-logits_to_keep] = -100
        if layout is None:  # TRL's own inputs (trl/trainer/grpo_trainer.py:1448, :1494-1495)
            inputs = {"input_ids": ids, "attention_mask": mask, "labels": labels}
        else:
            inputs = {
                "input_ids": layout.input_ids,
                "position_ids": layout.position_ids,
                "labels": to_packed(labels, layout, fill=-100),
            }
        if compute_aux_loss:
            inputs["output_router_logits"] = True
        with trainer.accelerator.autocast():
            return model(**inputs, fused_lm_head=True)

    def on_log(self, trainer: Any, logs: Any) -> dict[str, float]:
        if "loss" not in logs or not self.padded_tokens:
            return {}
        fraction = self.packed_tokens / self.padded_tokens
        self.packed_tokens = self.padded_tokens = 0
        return {names.PERF_PACKED_FRACTION: fraction}


def _padded(values: torch.Tensor, layout: PackedLayout | None, logits_to_keep: int) -> torch.Tensor:
    """The fused head's (N, W - 1) values (column j: token j + 1's) as TRL's (B, C) completion block."""
    if layout is None:
        return values[:, -logits_to_keep:]  # `outputs.log_probs[:, -logits_to_keep:]`, :1499
    return unpack(F.pad(values, (1, 0)), layout)[:, -logits_to_keep:]
