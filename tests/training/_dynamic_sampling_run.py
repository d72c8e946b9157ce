"""A tiny GSPOTrainer whose prompts say whether their group will tie, for the dynamic sampling tests
(tests/training/test_dynamic_sampling.py, and its 2-rank launch of this file as a script).

Rows are `tied i` or `open i`: the reward gives every completion of a `tied` prompt 1.0 (its group
has zero spread, zero advantage) and an `open` prompt's completions a value from their text
(spread: they teach something). `Recorder`, a probe placed after dynamic sampling, sees each
generation round's prompt rows and every minibatch's loss inputs.

    accelerate launch --multi_gpu --num_processes 2 tests/training/_dynamic_sampling_run.py \
        OUT MODEL_DIR [moe]

With `moe` (MODEL_DIR a tiny MoE) the run replays pi_old's routing, handed over as int16 the way
engine routing hands it (`EngineRoutingDtype`): dynamic sampling then gathers int16 rows.
"""

from __future__ import annotations

import json
import sys
import zlib
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from gspo_trl.training.probes.base import LossCall, Probe


def tied_or_text_reward(completions: list[str], kind: list[str], **_: Any) -> list[float]:
    """1.0 for every completion of a `tied` prompt; a spread value from the text otherwise."""
    return [
        1.0 if k == "tied" else (zlib.crc32(c.encode()) % 997) / 997
        for c, k in zip(completions, kind, strict=True)
    ]


def rows(pattern: str, count: int) -> list[dict[str, str]]:
    """`count` rows cycling through `pattern` (t: tied, o: open), e.g. 'tto'."""
    kinds = ["tied" if pattern[i % len(pattern)] == "t" else "open" for i in range(count)]
    return [{"prompt": f"{kind} {i}", "kind": kind} for i, kind in enumerate(kinds)]


class Recorder(Probe):
    """Each rollout round's prompt texts, and each training minibatch's decoded prompts and
    advantages (what the loss reads)."""

    def __init__(self) -> None:
        self.rounds: list[tuple[int, list[str]]] = []
        self.minibatches: list[dict[str, Any]] = []

    def around_rollout(
        self, trainer: Any, prompts: list[Any], proceed: Callable[[list[Any]], dict[str, Any]]
    ) -> dict[str, Any]:
        if trainer.model.training:
            self.rounds.append((trainer.state.global_step, [p["prompt"] for p in prompts]))
        return proceed(prompts)

    def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
        if not loss.training:
            return
        tokenizer = trainer.processing_class
        inputs = loss.inputs
        self.minibatches.append(
            {
                "step": trainer.state.global_step,
                "prompts": tokenizer.batch_decode(inputs["prompt_ids"], skip_special_tokens=True),
                "advantages": inputs["advantages"].tolist(),
                "shape": list(inputs["completion_ids"].shape),
                "old_logps": "old_per_token_logps" in inputs,
            }
        )


class EngineRoutingDtype(Probe):
    """Recorded routing as engine routing delivers it: int16 (gspo_trl.model.routing.engine)."""

    def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
        from gspo_trl.model.routing.engine import ROUTING_DTYPE
        from gspo_trl.training.probes.routing import ROUTED_EXPERTS

        if ROUTED_EXPERTS in batch:
            batch[ROUTED_EXPERTS] = batch[ROUTED_EXPERTS].to(ROUTING_DTYPE)
        return batch


def build(
    model_dir: Path,
    output_dir: Path,
    pattern: str,
    sampling: dict | None,
    *,
    probes: Sequence[Probe] = (),
    trainer_kwargs: dict[str, Any] | None = None,
    num_rows: int = 64,
    **config: Any,
):
    """A GSPOTrainer on the tiny model over `rows(pattern, num_rows)`, with a Recorder then
    `probes`; `trainer_kwargs` go to GSPOTrainer (peft_config, eval_dataset), `config` to
    GSPOConfig. Returns the trainer and the Recorder."""
    from datasets import Dataset
    from transformers import AutoTokenizer

    from gspo_trl.training.config import GSPOConfig
    from gspo_trl.training.trainer import GSPOTrainer

    args = dict(
        output_dir=str(output_dir),
        use_cpu=True,
        report_to="none",
        max_completion_length=8,
        num_generations=4,
        per_device_train_batch_size=4,
        steps_per_generation=2,
        max_steps=4,
        logging_steps=1,
        learning_rate=1e-3,
        save_strategy="no",
        seed=0,
        temperature=1.0,
        dataloader_num_workers=0,
        sampling=sampling,
    )
    args.update(config)
    recorder = Recorder()
    trainer = GSPOTrainer(
        model=str(model_dir),
        processing_class=AutoTokenizer.from_pretrained(model_dir),
        reward_funcs=[tied_or_text_reward],
        args=GSPOConfig(**args),
        train_dataset=Dataset.from_list(rows(pattern, num_rows)),
        probes=[recorder, *probes],
        **(trainer_kwargs or {}),
    )
    return trainer, recorder


def main(out: str, model_dir: str, moe: str = "") -> None:
    """Two gloo ranks: each writes its rounds and minibatches to OUT/rank{i}.json."""
    import torch.distributed as dist

    out_dir = Path(out)
    replay = {"probes": [EngineRoutingDtype()], "moe": {"routing_replay": "old"}} if moe else {}
    trainer, recorder = build(
        Path(model_dir),
        out_dir / "run",
        "tto",
        {"dynamic": True, "max_rounds": 3},
        per_device_train_batch_size=4,
        max_steps=2,
        **replay,
    )
    trainer.train()
    rank = trainer.accelerator.process_index
    logs = trainer.state.log_history
    record = {"rounds": recorder.rounds, "minibatches": recorder.minibatches, "logs": logs}
    (out_dir / f"rank{rank}.json").write_text(json.dumps(record))
    trainer.accelerator.wait_for_everyone()
    if dist.is_initialized():
        dist.destroy_process_group()


if __name__ == "__main__":
    main(*sys.argv[1:4])
