"""Real 2-process GSPO runs on CPU through the shipped accelerate configs: DDP, ZeRO-3 (ZeRO-2's
launches are tests/training/safety/test_interrupt.py's, checked the same way).

Each test launches `accelerate launch --config_file configs/X.yaml --num_processes 2
--mixed_precision no -m gspo_trl.train` exactly as a user would (only the process count
and precision are overridden for CPU), runs a few GSPO steps on the tiny model with 2 gloo
ranks, and checks the checkpoint: written by both ranks, loadable with from_pretrained,
trained (weights moved) and identical to the final saved model.

FSDP2 is not run here: accelerate only turns FSDP on for GPU-family distributed types; on a
CPU machine the same launch silently becomes plain multi-CPU DDP (docs/scaling.md), so a
test of it would not test FSDP.

Every launch runs in its own process group under a hard timeout and the whole group is
killed on expiry, because a gloo shutdown can hang forever.
"""

from __future__ import annotations

import contextlib
import json
import os
import re
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import time
import warnings
from collections.abc import Iterator
from pathlib import Path

import psutil
import pytest
import torch

from tests._gspo_helpers import tiny_model_dir
from tests._paths import ROOT

ACCELERATE = [sys.executable, "-m", "accelerate.commands.launch"]
LAUNCH_TIMEOUT_S = 420
"""Per launch: a few steps take ~30 s; the first DeepSpeed launch on a fresh machine also
compiles its CPU comm op (~1-2 min, cached under ~/.cache/torch_extensions)."""

MINI_RECIPE = """\
algorithm: gspo
model: {{name_or_path: {model}, dtype: float32}}
data: {{path: "synthetic:reversal", num_rows: 64, solution_column: solution}}
rewards: ["{reward}"]
epsilon: 0.02
epsilon_high: 0.027
learning_rate: 3.0e-4
lr_scheduler_type: constant
num_generations: 4
per_device_train_batch_size: 4
max_completion_length: 8
temperature: 1.0
logging_steps: 1
save_strategy: steps
report_to: none
seed: 0
"""


def free_port() -> int:
    """A TCP port nobody listens on now, so parallel launches do not share a rendezvous."""
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


REWARD_MODULE = """\
import json, os


def text_length_reward(completions, **kwargs):
    \"\"\"Characters in the completion (0-1): spread on random text, so every group learns.

    With GSPO_REWARD_LOG set, also appends the prompts and completions it scored as one JSON
    line: the resume test compares data order and sampling between runs with it.
    \"\"\"
    texts = [c[-1]["content"] if isinstance(c, list) else c for c in completions]
    if os.environ.get("GSPO_REWARD_LOG"):
        prompts = [p[-1]["content"] if isinstance(p, list) else p for p in kwargs["prompts"]]
        with open(os.environ["GSPO_REWARD_LOG"], "a") as log:
            log.write(json.dumps({"prompts": prompts, "completions": texts}) + "\\n")
    return [min(len(text), 40) / 40.0 for text in texts]
"""


def write_mini_recipe(directory: Path, model: Path) -> Path:
    """A tiny GSPO recipe whose reward (completion length in characters) has spread."""
    module = directory / "length_reward.py"
    module.write_text(REWARD_MODULE)
    reward = f"{module}:text_length_reward"
    path = directory / "mini.yaml"
    path.write_text(MINI_RECIPE.format(model=model, reward=reward))
    return path


def subprocess_env(**extra: str) -> dict[str, str]:
    """Offline, single-threaded-tokenizer environment for launched runs."""
    env = dict(os.environ, HF_HUB_OFFLINE="1", TOKENIZERS_PARALLELISM="false", PYTHONUNBUFFERED="1")
    env.update(extra)
    return env


_LAUNCHED: list[subprocess.Popen] = []
"""Every group started by a test, so teardown can kill what a failing test left running."""


def start(command: list[str], log: Path, env: dict[str, str] | None = None) -> subprocess.Popen:
    """Start `command` in a new process group (so it can be killed whole), output to `log`."""
    with log.open("wb") as out:
        process = subprocess.Popen(
            command,
            cwd=ROOT,
            env=env or subprocess_env(),
            stdout=out,
            stderr=subprocess.STDOUT,
            start_new_session=True,
        )
    _LAUNCHED.append(process)
    return process


@pytest.fixture(autouse=True)
def kill_leftover_launches() -> Iterator[None]:
    """After each test, SIGKILL any launch still running (e.g. the test hit pytest's timeout
    while waiting on it): a hung gloo rank must not outlive its test."""
    yield
    while _LAUNCHED:
        process = _LAUNCHED.pop()
        if process.poll() is None:
            kill_group(process)
            process.wait(timeout=30)


def kill_group(process: subprocess.Popen, sig: int = signal.SIGKILL) -> None:
    """Send `sig` to the launched process group and to every descendant.

    torchrun starts each rank in a session of its own, so killing the launcher's group
    alone would orphan the ranks; they are collected (psutil, an accelerate dependency)
    before anything is killed.
    """
    try:
        descendants = psutil.Process(process.pid).children(recursive=True)
    except psutil.NoSuchProcess:
        descendants = []
    with contextlib.suppress(ProcessLookupError):  # the group already exited
        os.killpg(process.pid, sig)
    for child in descendants:
        with contextlib.suppress(psutil.NoSuchProcess):
            child.send_signal(sig)


def wait_or_kill(process: subprocess.Popen, log: Path, timeout: float) -> int:
    """Exit status, or fail the test (killing the whole group) when `timeout` passes."""
    try:
        return process.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        kill_group(process)
        process.wait(timeout=30)
        pytest.fail(f"launch timed out after {timeout:.0f} s; log tail:\n{tail(log)}")


def tail(log: Path, lines: int = 40) -> str:
    return "\n".join(log.read_text(errors="replace").splitlines()[-lines:])


RANK_KILLED_BY_SIGNAL = re.compile(r"Signal \d+ \((SIGABRT|SIGSEGV)\) received by PID")


def run_launch(
    config: str, recipe: Path, output_dir: Path, overrides: list[str], timeout: float = LAUNCH_TIMEOUT_S
) -> Path:
    """`accelerate launch --config_file configs/<config>` with 2 CPU ranks; returns the log path."""
    log = output_dir.parent / f"{output_dir.name}.log"
    command = [
        *ACCELERATE,
        *("--config_file", str(ROOT / "configs" / config), "--num_processes", "2"),
        *("--mixed_precision", "no", "--main_process_port", str(free_port())),
        *("-m", "gspo_trl.train", "--config", str(recipe), "--output_dir", str(output_dir)),
        *overrides,
    ]
    status = wait_or_kill(start(command, log), log, timeout)
    if status != 0 and RANK_KILLED_BY_SIGNAL.search(log.read_text(errors="replace")):
        # A gloo rank on CPU occasionally aborts (SIGABRT) in collective set-up or teardown;
        # relaunch once from scratch, keeping the first log. Any other failure, or a second
        # one, fails the test.
        log.rename(log.with_suffix(".attempt1.log"))
        shutil.rmtree(output_dir, ignore_errors=True)
        warnings.warn(
            f"{config}: a rank died by a signal; relaunching once (see {log}.attempt1)", stacklevel=2
        )
        status = wait_or_kill(start(command, log), log, timeout)
    assert status == 0, f"{config} launch failed ({status}); log tail:\n{tail(log)}"
    return log


def load_weights(directory: Path) -> dict[str, torch.Tensor]:
    """State dict of the model saved in `directory`, loaded the way users load it."""
    from transformers import AutoModelForCausalLM

    model = AutoModelForCausalLM.from_pretrained(directory, dtype=torch.float32)
    return {name: tensor.detach().clone() for name, tensor in model.state_dict().items()}


@pytest.fixture(scope="module")
def model_dir(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """Built once before launching, so two ranks never race to build the tiny model."""
    return tiny_model_dir(tmp_path_factory.mktemp("dist-model"))


DEEPSPEED_OP_BUILD_TIMEOUT_S = 900
"""Compiling DeepSpeed's CPU comm op: 118 s wall (76 s CPU) measured at load 3.5 on 2 cores."""


@pytest.fixture(scope="session")
def deepspeed_ready() -> None:
    """DeepSpeed importable, and its CPU shared-memory comm op compiled before the first launch.

    A DeepSpeed launch on CPU JIT-compiles `deepspeed_shm_comm` (deepspeed/comm/torch.py,
    `build_shm_op`: `builder.load()`) into torch's extensions dir (TORCH_EXTENSIONS_DIR, default
    ~/.cache/torch_extensions), once per machine: later launches load the cached .so. Built here,
    under a limit of its own, that first build no longer eats the first launch's LAUNCH_TIMEOUT_S
    or RUN_TIMEOUT_S on a fresh or busy machine, and a build failure is named as one.
    """
    pytest.importorskip("deepspeed", reason='needs DS_BUILD_OPS=0 pip install "deepspeed>=0.18.6"')
    build = "from deepspeed.comm.torch import build_shm_op; build_shm_op()"
    try:
        result = subprocess.run(
            [sys.executable, "-c", build],
            capture_output=True,
            text=True,
            timeout=DEEPSPEED_OP_BUILD_TIMEOUT_S,
        )
    except subprocess.TimeoutExpired:
        pytest.fail(
            f"building DeepSpeed's CPU comm op took over {DEEPSPEED_OP_BUILD_TIMEOUT_S} s", pytrace=False
        )
    assert result.returncode == 0, f"building DeepSpeed's CPU comm op failed:\n{result.stderr[-3000:]}"


def assert_a_loadable_trained_checkpoint(
    output_dir: Path, step: int, model_dir: Path, log: Path, deepspeed: bool
) -> None:
    """checkpoint-<step> written by both ranks, loadable, trained, and equal to the final model."""
    checkpoint = output_dir / f"checkpoint-{step}"
    assert (checkpoint / "trainer_state.json").is_file(), f"no checkpoint-{step}; log:\n{tail(log)}"
    for rank in (0, 1):
        assert (checkpoint / f"rng_state_{rank}.pth").is_file(), f"rank {rank} did not run or save"
    if deepspeed:
        assert (checkpoint / f"global_step{step}").is_dir(), "not a DeepSpeed engine checkpoint"

    initial, saved, final = load_weights(model_dir), load_weights(checkpoint), load_weights(output_dir)
    assert saved.keys() == initial.keys()
    for name, tensor in saved.items():
        assert tensor.shape == initial[name].shape, f"{name}: saved shard, not the full tensor"
        assert torch.isfinite(tensor).all(), f"{name}: non-finite weights"
        torch.testing.assert_close(tensor, final[name], msg=f"{name}: checkpoint-{step} != final model")
    moved = sum(not torch.equal(saved[name], initial[name]) for name in saved)
    assert moved > len(saved) // 2, f"only {moved}/{len(saved)} tensors changed: did training happen?"


@pytest.mark.distributed
@pytest.mark.slow
def test_two_process_gspo_run_saves_a_loadable_checkpoint(model_dir: Path, tmp_path: Path) -> None:
    """2 gloo ranks (DDP), 2 GSPO steps (one on-, one off-policy), checkpoint-2 loads and trained.
    ZeRO-3's same run is the first launch of test_zero3_run_resumes_from_its_sharded_checkpoint,
    which checks it the same way before resuming; ZeRO-2's scheduled save is checked the same way
    by the last launch of tests/training/safety/test_interrupt.py's 2-rank test (a ZeRO-2 launch
    of its own here cost ~19 s of CI)."""
    recipe = write_mini_recipe(tmp_path, model_dir)
    output_dir = tmp_path / "out"
    log = run_launch("ddp.yaml", recipe, output_dir, ["--max_steps", "2", "--save_steps", "2"])
    assert_a_loadable_trained_checkpoint(output_dir, 2, model_dir, log, deepspeed=False)


@pytest.mark.distributed
@pytest.mark.slow
@pytest.mark.timeout(2 * LAUNCH_TIMEOUT_S + 60)
@pytest.mark.usefixtures("deepspeed_ready")
def test_zero3_run_resumes_from_its_sharded_checkpoint(model_dir: Path, tmp_path: Path) -> None:
    """ZeRO-3's 2-step run saves a loadable, trained checkpoint-2 (as the DDP run of
    test_two_process_gspo_run_saves_a_loadable_checkpoint does), and --resume loads its sharded
    engine state (weights, Adam, scheduler) and goes on.

    The exact-resume comparison (data order, samples, Adam moments) is tests/training/safety/test_resume.py;
    this checks that the DeepSpeed checkpoint format itself round-trips across 2 ranks.
    """
    recipe = write_mini_recipe(tmp_path, model_dir)
    output_dir = tmp_path / "out"
    log = run_launch("zero3.yaml", recipe, output_dir, ["--max_steps", "2", "--save_steps", "2"])
    assert_a_loadable_trained_checkpoint(output_dir, 2, model_dir, log, deepspeed=True)
    first = json.loads((output_dir / "trainer_state.json").read_text())["log_history"]
    at_step_2 = load_weights(output_dir / "checkpoint-2")
    saved_at = (output_dir / "checkpoint-2" / "trainer_state.json").stat().st_mtime_ns

    log = run_launch("zero3.yaml", recipe, output_dir, ["--max_steps", "4", "--save_steps", "2", "--resume"])

    state = json.loads((output_dir / "trainer_state.json").read_text())
    assert state["global_step"] == 4, tail(log)
    rewritten = (output_dir / "checkpoint-2" / "trainer_state.json").stat().st_mtime_ns != saved_at
    assert not rewritten, "checkpoint-2 was written again: the run restarted instead of resuming"
    losses = {e["step"]: e["loss"] for e in state["log_history"] if "loss" in e}
    assert sorted(losses) == [1, 2, 3, 4], "steps 1-2 should come from the checkpoint, 3-4 be new"
    assert [losses[1], losses[2]] == [e["loss"] for e in first if "loss" in e]
    assert (output_dir / "checkpoint-4" / "global_step4").is_dir()
    at_step_4 = load_weights(output_dir / "checkpoint-4")
    assert any(not torch.equal(at_step_4[n], at_step_2[n]) for n in at_step_2), "no training after resume"


SLURM_SCRIPT = ROOT / "scripts" / "slurm" / "train.slurm"


def slurm_dry_run(*args: str) -> subprocess.CompletedProcess:
    """The slurm launcher's --dry-run outside slurm (no SLURM_* variables), bounded."""
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    env["PYTHON"] = sys.executable  # reads the recipe's launch: section with this package
    return subprocess.run(
        ["bash", str(SLURM_SCRIPT), "--dry-run", *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )


@pytest.mark.distributed
def test_slurm_dry_run_prints_server_health_wait_and_one_fail_fast_training_step() -> None:
    """4 nodes: the last serves vLLM (TP 4 x DP 2); /health is polled before anything trains;
    then one srun runs the 3 training nodes with c10d, killing them all when one fails, and
    each node's launch (machine rank = its $SLURM_NODEID) parses."""
    from accelerate.commands.launch import launch_command_parser

    from gspo_trl.cli.recipe_args import split_argv
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.config.validation import validate

    result = slurm_dry_run(
        *("--num-nodes", "4", "--model", "Qwen/Qwen3-30B-A3B", "--config", "configs/zero3.yaml"),
        *("--recipe", "recipes/qwen3-30b-a3b/math.yaml", "--vllm-tp", "4", "--vllm-dp", "2"),
        *("--vllm-health-timeout", "900", "--", "--learning_rate", "3e-7", "--resume"),
    )
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line.rstrip("&")) for line in result.stdout.splitlines() if line.strip()]
    assert [c[0] for c in commands] == ["srun", "curl", "srun"], result.stdout
    server, health, training = commands

    assert "--nodelist=node4" in server
    assert server[server.index("--model") + 1] == "Qwen/Qwen3-30B-A3B"
    assert server[server.index("--tensor_parallel_size") + 1] == "4"
    assert server[server.index("--data_parallel_size") + 1] == "2"
    assert server[server.index("--host") + 1] == "0.0.0.0"  # reachable from the training nodes

    assert "http://node4:8000/health" in health and "900s," in health  # bounded wait, in the order run

    assert "--kill-on-bad-exit=1" in training and any(a.startswith("--wait=") for a in training)
    assert {"--nodes=3", "--ntasks=3", "--ntasks-per-node=1", "--nodelist=node1,node2,node3"} <= set(training)
    script = training[training.index("-c") + 1]
    assert script.endswith('exec accelerate launch --machine_rank "$SLURM_NODEID" "$@"')  # after VLLM_HOST_IP
    launch_args = training[training.index("-c") + 3 :]  # after the script and its $0

    parser = launch_command_parser()
    for rank in range(3):
        args = parser.parse_args(["--machine_rank", str(rank), *launch_args])
        assert (args.config_file, args.num_machines, args.num_processes) == ("configs/zero3.yaml", 3, 24)
        assert (args.machine_rank, args.main_process_ip, args.rdzv_backend) == (rank, "node1", "c10d")
        assert args.module and args.training_script == "gspo_trl.train"
        path, resume, overrides = split_argv(args.training_script_args)
        assert resume and path == "recipes/qwen3-30b-a3b/math.yaml"
        recipe = load_recipe(ROOT / path, overrides)
        validate(recipe, processes=24)
        assert recipe.model.name_or_path == "Qwen/Qwen3-30B-A3B"
        training_keys = recipe.training
        assert (
            training_keys["vllm_mode"],
            training_keys["vllm_server_host"],
            training_keys["learning_rate"],
        ) == (
            "server",
            "node4",
            3e-7,
        )


def test_slurm_dry_run_without_overrides_works_with_set_u() -> None:
    """No recipe overrides: the empty array must not trip `set -u` (bash < 4.4 treats
    "${a[@]}" of an empty array as unbound; the script guards every possibly-empty array)."""
    result = slurm_dry_run(*SLURM_GOOD_ARGS)
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines()[-1].rstrip().endswith("--vllm_server_port 8000")
    text = SLURM_SCRIPT.read_text()
    for array in re.findall(r"^\s*(\w+)=\(\)", text, flags=re.MULTILINE):  # declared empty
        bare = re.findall(r'(?<!\+)"\$\{' + array + r'\[@\]\}"', text)
        assert not bare, f'{array}: "${{{array}[@]}}" unguarded under set -u (use ${{{array}[@]+...}})'


SLURM_GOOD_ARGS = ("--model", "m", "--recipe", "recipes/qwen3-8b/math.yaml", "--config", "configs/zero3.yaml")


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--recipe", "recipes/qwen3-8b/math.yaml", "--config", "configs/zero3.yaml"], "--model is required"),
        (["--model", "m", "--recipe", "nope.yaml", "--config", "configs/zero3.yaml"], "no such file"),
        (
            [*SLURM_GOOD_ARGS, "--vllm-tp", "3"],
            "must use the vLLM node's 8 GPUs",
        ),
        (
            [*SLURM_GOOD_ARGS, "--num-nodes", "1"],
            "at least 2 nodes",
        ),
    ],
    ids=["no-model", "missing-recipe", "tp-dp-mismatch", "one-node"],
)
def test_slurm_refuses_bad_arguments(args: list[str], message: str) -> None:
    result = slurm_dry_run(*args)
    assert result.returncode == 2 and message in result.stderr, (result.returncode, result.stderr)
    assert not result.stdout, "printed commands despite refusing"


FAKE_SRUN = """#!/bin/bash
# Stands in for srun: logs its arguments; the vLLM server step behaves as $FAKE_SERVER says.
echo "$*" >> "$SRUN_LOG"
if [[ "$*" == *vllm-serve* ]]; then
    [[ "$FAKE_SERVER" == dies ]] && exit 1
    exec sleep 60
fi
"""


@pytest.mark.parametrize(
    ("server", "message"),
    [
        ("silent", "did not answer http://node2:8000/health within 2s"),
        ("dies", "exited before answering http://node2:8000/health"),
    ],
)
def test_slurm_stops_before_training_when_the_server_never_answers(
    tmp_path: Path, server: str, message: str
) -> None:
    """Inside an allocation (fake srun/scontrol on PATH), a server that never answers /health
    ends the job with a message once the wait is over, and no training step is started."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    (bin_dir / "srun").write_text(FAKE_SRUN)
    (bin_dir / "scontrol").write_text("#!/bin/bash\nprintf 'node1\\nnode2\\n'\n")
    for tool in bin_dir.iterdir():
        tool.chmod(0o755)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    env.update(
        PATH=f"{bin_dir}:{env['PATH']}",
        SLURM_JOB_NODELIST="node[1-2]",
        SRUN_LOG=str(tmp_path / "srun.log"),
        FAKE_SERVER=server,
        VLLM_HEALTH_POLL="1",
        PYTHON=sys.executable,
    )
    started = time.monotonic()
    result = subprocess.run(
        ["bash", str(SLURM_SCRIPT), *SLURM_GOOD_ARGS, "--vllm-health-timeout", "2"],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert time.monotonic() - started < 30
    assert result.returncode == 2 and message in result.stderr, result.stderr
    calls = (tmp_path / "srun.log").read_text().splitlines()
    assert len(calls) == 1 and "vllm-serve" in calls[0], calls  # the training step never ran


def test_slurm_script_passes_shellcheck() -> None:
    """CI installs shellcheck (apt-get install -y shellcheck); skipped only where it is absent."""
    shellcheck = shutil.which("shellcheck")
    if shellcheck is None:
        pytest.skip("shellcheck not installed (apt-get install -y shellcheck)")
    result = subprocess.run([shellcheck, str(SLURM_SCRIPT)], capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stdout + result.stderr


CPU_OVERRIDES = ("--num_processes", "2", "--mixed_precision", "no")
"""What turns a shipped 8-GPU bf16 config into the 2-rank CPU launch the tests run."""

RANK_SCRIPT = """\
from accelerate import Accelerator

accelerator = Accelerator(cpu=True)  # what gspo_trl.train asks for on a machine without CUDA
state = accelerator.state
print(f"rank {state.process_index}/{state.num_processes} {state.backend} {state.distributed_type.value}")
"""


@pytest.mark.distributed
@pytest.mark.parametrize(
    ("launch_args", "expected"),
    [
        (
            ["--config_file", str(ROOT / "configs" / "cpu_2proc.yaml")],
            ["rank 0/2 gloo MULTI_CPU", "rank 1/2 gloo MULTI_CPU"],
        ),
        (["--cpu", "--num_processes", "2"], ["rank 0/1 None NO"]),
        (
            [*("--config_file", str(ROOT / "configs" / "fsdp2.yaml")), *CPU_OVERRIDES],
            ["rank 0/2 gloo MULTI_CPU", "rank 1/2 gloo MULTI_CPU"],
        ),
    ],
    ids=["cpu_2proc.yaml", "cpu-flag-starts-one", "fsdp2-is-not-fsdp-on-cpu"],
)
def test_what_cpu_launches_really_start(launch_args: list[str], expected: list[str], tmp_path: Path) -> None:
    """configs/cpu_2proc.yaml starts 2 gloo ranks; `--cpu --num_processes 2` silently starts 1;
    configs/fsdp2.yaml on CPU runs as MULTI_CPU (plain DDP), which is why no FSDP2 training
    test runs here. If accelerate ever enables FSDP on CPU, the last case fails: add the test.
    """
    script = tmp_path / "ranks.py"
    script.write_text(RANK_SCRIPT)
    log = tmp_path / "ranks.log"
    command = [*ACCELERATE, *launch_args, "--main_process_port", str(free_port()), str(script)]
    status = wait_or_kill(start(command, log), log, 120)
    assert status == 0, tail(log)
    # the ranks print at once: two lines can land as one ("...MULTI_CPUrank 1/2 ..."), so match
    # each rank's words rather than whole lines
    ranks = sorted(re.findall(r"rank \d+/\d+ \S+ [A-Z_]+", log.read_text()))
    assert ranks == expected, tail(log)
