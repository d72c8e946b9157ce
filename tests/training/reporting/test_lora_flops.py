"""LoRA's FLOPs (issue 34 item 5): a frozen base runs no weight-gradient matmuls, so `perf/mfu`
and `gspo-trl plan` count 4N + 6 x adapters per token, not 6N, checked against torch's count."""

from __future__ import annotations

import pytest
from torch.utils.flop_counter import FlopCounterMode

from gspo_trl.training.probes.perf import PerfProbe
from tests._gspo_helpers import GSPO_ARGS, length_reward, tiny_model_dir


def test_lora_update_flops_match_torchs_count(tmp_path):
    """One real LoRA update on the tiny model under FlopCounterMode against the meter's count
    (torch does not count the CPU attention kernel; the plan does). Counted as full fine-tuning,
    the plan was 1.38x torch's count on this model (714.5M vs 518.8M)."""
    from datasets import Dataset
    from peft import LoraConfig
    from transformers import AutoTokenizer

    from gspo_trl.training.config import GSPOConfig
    from gspo_trl.training.trainer import GSPOTrainer

    model_dir = tiny_model_dir(tmp_path)
    args = dict(
        output_dir=str(tmp_path / "out"), use_cpu=True, report_to="none", max_completion_length=12,
        num_generations=4, per_device_train_batch_size=8, max_steps=2, logging_steps=1,
        learning_rate=1e-3, save_strategy="no", seed=0, dataloader_num_workers=0,
        gradient_checkpointing=False, bf16=False,
    )  # fmt: skip
    args.update(GSPO_ARGS)
    trainer = GSPOTrainer(
        model=str(model_dir),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=[length_reward],
        args=GSPOConfig(**args),
        train_dataset=Dataset.from_list([{"prompt": f"add {i} and {i + 3}"} for i in range(64)]),
        peft_config=LoraConfig(r=8, lora_alpha=16, target_modules="all-linear", task_type="CAUSAL_LM"),
    )
    assert trainer.probes.find(PerfProbe).meter.shape.lora_adapter_params > 0
    seen: dict[str, float] = {}
    training_step = trainer.training_step

    def counted_step(model, inputs, num_items):
        if trainer._step != 1:  # the second update reuses the buffered rollout: no generation inside
            return training_step(model, inputs, num_items)
        before = trainer.probes.find(PerfProbe).meter.update_flops
        with FlopCounterMode(display=False) as counter:
            out = training_step(model, inputs, num_items)
        seen.update(
            counted=counter.get_total_flops(), plan=trainer.probes.find(PerfProbe).meter.update_flops - before
        )
        return out

    trainer.training_step = counted_step
    trainer.train()
    assert seen["plan"] == pytest.approx(seen["counted"], rel=0.10), seen
