"""scripts/slurm/train.slurm, server mode across nodes: VLLM_HOST_IP on both sides of the weight
sync, and a vLLM layout whose every engine joins it (docs/scaling.md, "Server mode across nodes").

Each shipped recipe launched through the script is dry-run with its header's own arguments.
The prefix that sets VLLM_HOST_IP is then run for real, here, as the script ships it.
"""

from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

from gspo_trl.config.recipe import load_recipe
from tests._paths import ROOT

SCRIPT = ROOT / "scripts" / "slurm" / "train.slurm"
SLURM_RECIPES = [
    path
    for path in sorted((ROOT / "recipes").glob("**/*.yaml"))
    if "train.slurm" in (load_recipe(path).launch.command or "")
]
EXTERNAL_DP_FLAGS = ("data_parallel_external_lb", "data_parallel_hybrid_lb", "data_parallel_rank")
"""vLLM flags (either spelling) that split DP engines across API servers or nodes: each API
server's client then manages only its local engines (core_client.py, `local_engines_only`), and
a weight sync through one server would miss the others."""


def header_launch_args(path: Path) -> tuple[int, list[str]]:
    """(nodes, script arguments) of a recipe's `launch.command`, `sbatch --nodes=N train.slurm ...`."""
    words = shlex.split(load_recipe(path).launch.command)
    nodes = int(next(w for w in words if w.startswith("--nodes=")).split("=", 1)[1])
    return nodes, words[words.index("scripts/slurm/train.slurm") + 1 :]


def dry_run(path: Path) -> tuple[list[str], list[str]]:
    """The server and the training srun commands the script prints for `path`'s launch command."""
    nodes, args = header_launch_args(path)
    env = {key: value for key, value in os.environ.items() if not key.startswith("SLURM_")}
    env["PYTHON"] = sys.executable  # reads the recipe's launch: section with this package
    result = subprocess.run(
        ["bash", str(SCRIPT), "--dry-run", "--num-nodes", str(nodes), *args],
        cwd=ROOT,
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    commands = [shlex.split(line.rstrip("&")) for line in result.stdout.splitlines() if line.strip()]
    server, training = (c for c in commands if c[0] == "srun")
    return server, training


def remote_script(srun: list[str]) -> tuple[str, str]:
    """The `bash -c SCRIPT $0` a srun command runs on its node: (SCRIPT, $0)."""
    at = srun.index("-c")
    return srun[at + 1], srun[at + 2]


def node_of(srun: list[str]) -> str:
    return next(a for a in srun if a.startswith("--nodelist=")).split("=", 1)[1]


def test_the_slurm_recipes_are_found():
    assert {p.parent.name for p in SLURM_RECIPES} >= {"qwen3-8b", "qwen3-30b-a3b"}


@pytest.mark.parametrize("path", SLURM_RECIPES, ids=lambda p: p.parent.name)
def test_both_sides_of_the_weight_sync_export_vllm_host_ip_towards_the_other(path):
    """TRL's client sends the trainer's get_ip() as the rendezvous address; fails on the old
    script, which left it to get_ip() (0.0.0.0 on a node without a default route)."""
    server, training = dry_run(path)
    server_script, server_peer = remote_script(server)
    training_script, training_peer = remote_script(training)
    for script in (server_script, training_script):
        assert "export VLLM_HOST_IP=" in script
    assert server_peer == node_of(training).split(",")[0]  # the first training node: the main process
    assert training_peer == node_of(server)
    assert server[server.index("--host") + 1] == "0.0.0.0"  # listens on every interface


@pytest.mark.parametrize("path", SLURM_RECIPES, ids=lambda p: p.parent.name)
def test_the_serve_layout_lets_every_engine_join_the_weight_sync(path):
    """One vLLM node, TP x DP filling it, vLLM's internal load balancing: one API client manages
    every DP engine, fans each weight-transfer call out to all of them, and each engine's worker
    takes NCCL rank dp_index x TP + tp_rank + 1 of TP x DP + 1 (docs/scaling.md quotes the lines)."""
    server, _ = dry_run(path)
    vllm = server[server.index("vllm-serve") :]
    tp = int(vllm[vllm.index("--tensor_parallel_size") + 1])
    dp = int(vllm[vllm.index("--data_parallel_size") + 1])
    gpus = int(next(a for a in server if a.startswith("--gpus-per-node=")).split("=", 1)[1])
    assert "--nodes=1" in server and tp * dp == gpus
    flags = {word.lstrip("-").replace("-", "_").split("=", 1)[0] for word in vllm}
    assert not flags & {*EXTERNAL_DP_FLAGS, "distributed_executor_backend", "nnodes"}, vllm


@pytest.fixture(scope="module")
def host_ip_script() -> str:
    server, _ = dry_run(SLURM_RECIPES[0])
    return remote_script(server)[0]


@pytest.mark.parametrize("peer", ["127.0.0.1", "localhost"])
def test_the_shipped_prefix_exports_the_source_address_towards_the_peer(host_ip_script, peer):
    env = {key: value for key, value in os.environ.items() if key != "VLLM_HOST_IP"}
    result = subprocess.run(
        ["bash", "-c", host_ip_script, peer, "printenv", "VLLM_HOST_IP"],
        env=env,
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.strip() == "127.0.0.1"


def test_the_prefix_stops_with_a_message_when_the_peer_cannot_be_reached(host_ip_script):
    result = subprocess.run(
        ["bash", "-c", host_ip_script, "no-such-node.invalid", "echo", "ran"],
        capture_output=True,
        text=True,
        timeout=60,
    )
    assert result.returncode == 2 and "ran" not in result.stdout
    assert re.search(r"no IPv4 route to no-such-node\.invalid to set VLLM_HOST_IP", result.stderr)
