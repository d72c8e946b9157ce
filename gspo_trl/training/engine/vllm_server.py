"""Is the vLLM server a `vllm_mode: server` recipe needs up? Asked before the model loads.

Without this, a server-mode run with no server loads the model, builds the trainer, then waits
TRL's `vllm_server_timeout` (240 s) on every attempt before a ConnectionError; launched from
the multi-GPU configs it costs minutes and a stack trace. Here the same health endpoint TRL's
VLLMClient polls (`GET {base_url}/health`) is asked for a few seconds, and a missing server
is a RecipeError naming the keys to fix and the command that starts one.
"""

from __future__ import annotations

import time
import urllib.error
import urllib.request
from typing import Any

from gspo_trl.core.errors import RecipeError

CHECK_TIMEOUT_S = 5.0
"""How long a train start waits for the server to answer: it is meant to be up already (the
slurm launcher waits for it); a first-time model download is waited for there, not here."""
RETRY_INTERVAL_S = 0.5


def server_base_url(args: Any) -> str:
    """The URL TRL will connect to: vllm_server_base_url, else http://host:port."""
    if args.vllm_server_base_url:
        return str(args.vllm_server_base_url).rstrip("/")
    return f"http://{args.vllm_server_host}:{args.vllm_server_port}"


def _answers(url: str, timeout_s: float) -> str | None:
    """None when `url` answers 200, else why not (one short phrase)."""
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            return None if response.status == 200 else f"HTTP {response.status}"
    except urllib.error.HTTPError as error:
        return f"HTTP {error.code}"
    except (urllib.error.URLError, OSError) as error:
        reason = getattr(error, "reason", error)
        return str(reason) or type(error).__name__


def server_vllm_version(base_url: str, timeout_s: float = CHECK_TIMEOUT_S) -> str | None:
    """The server's vLLM version: `trl vllm-serve` runs vLLM's own server (trl/scripts/vllm_serve.py,
    `vllm.entrypoints.cli.main serve`), which answers `GET /version` with {"version": ...}
    (vllm/entrypoints/serve/instrumentator/basic.py:53-56). None when it does not say."""
    import json

    try:
        with urllib.request.urlopen(f"{base_url}/version", timeout=timeout_s) as response:
            return str(json.loads(response.read())["version"])
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return None


def check_server_for_moe(base_url: str, model: str) -> None:
    """A mixture-of-experts model served by a vLLM too old to load TRL's stacked experts is
    refused before training (gspo_trl.config.sections.moe.check_moe_weight_sync): the server's
    vLLM loads the synced weights, not the trainer's."""
    from gspo_trl.config.sections.moe import check_moe_weight_sync, expert_count, local_model_config

    config = local_model_config(model)
    if config is None or expert_count(config) <= 0:
        return
    check_moe_weight_sync(model, expert_count(config), server_vllm_version(base_url))


def check_vllm_server(args: Any, timeout_s: float = CHECK_TIMEOUT_S, model: str | None = None) -> None:
    """Raise RecipeError unless a server-mode run's vLLM server answers its health check (and,
    for a mixture-of-experts `model`, runs a vLLM that loads its synced experts)."""
    if not getattr(args, "use_vllm", False) or getattr(args, "vllm_mode", None) != "server":
        return
    base_url = server_base_url(args)
    url = f"{base_url}/health"
    deadline = time.monotonic() + timeout_s
    while True:
        problem = _answers(url, timeout_s=max(0.1, min(2.0, deadline - time.monotonic())))
        if problem is None:
            if model is not None:
                check_server_for_moe(base_url, model)
            return
        if time.monotonic() + RETRY_INTERVAL_S >= deadline:
            break
        time.sleep(RETRY_INTERVAL_S)
    keys = (
        f"vllm_server_base_url: {args.vllm_server_base_url}"
        if args.vllm_server_base_url
        else f"vllm_server_host: {args.vllm_server_host}, vllm_server_port: {args.vllm_server_port}"
    )
    raise RecipeError(
        f"vllm_mode: server, but no vLLM server answers at {url} ({keys}) within {timeout_s:g} s: "
        f"{problem}. Start one first, on a host the trainers can reach: `trl vllm-serve --model MODEL "
        f"--host 0.0.0.0 --port {args.vllm_server_port}` (docs/vllm.md), then point "
        "vllm_server_host (or vllm_server_base_url) at it; or train with vllm_mode: colocate."
    )


def health_problem(base_url: str, timeout_s: float = CHECK_TIMEOUT_S) -> str | None:
    """None when the server at `base_url` answers its health check now, else why not (one phrase)."""
    return _answers(f"{base_url.rstrip('/')}/health", timeout_s)
