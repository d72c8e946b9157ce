"""Is the vLLM server a `vllm_mode: server` recipe needs up, and can it take this trainer's
weights? Asked before the model loads; and a server lost mid-run said in one line.

Without this, a server-mode run with no server loads the model, builds the trainer, then waits
TRL's `vllm_server_timeout` (240 s) on every attempt before a ConnectionError; launched from
the multi-GPU configs it costs minutes and a stack trace. Here the same health endpoint TRL's
VLLMClient polls (`GET {base_url}/health`) is asked for a few seconds, and a missing server
is a RecipeError naming the keys to fix and the command that starts one. A server whose
weight-transfer backend this trainer cannot speak (NCCL from a CPU trainer, gloo from a CUDA
one, none at all) is refused the same way, instead of failing in the rendezvous after the load.
"""

from __future__ import annotations

import contextlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from pathlib import Path
from typing import Any

from gspo_trl.core.errors import RecipeError, VLLMServerLost

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
            check_weight_transfer(base_url, trainer_on_cuda(args))
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


GLOO_SERVER = (
    '`trl vllm-serve ... --weight-transfer-config \'{"backend": "gloo"}\'` with the gspo-trl '
    'plugin alias on its PYTHONPATH (docs/vllm.md, "Server mode on CPU")'
)


def trainer_on_cuda(args: Any) -> bool:
    """Whether TRL's client sends from a CUDA device (its NCCL path) or from CPU (gloo)."""
    import torch

    return torch.cuda.is_available() and not getattr(args, "use_cpu", False)


def server_weight_backend(base_url: str, timeout_s: float = CHECK_TIMEOUT_S) -> tuple[bool, str | None]:
    """(known, backend): the server's weight-transfer backend from `/server_info`, the endpoint
    TRL's client reads (trl/generation/vllm_client.py:310-318); known is False when the server does
    not say (no dev-mode endpoints), and then TRL's own checks run as before."""
    url = f"{base_url}/server_info?config_format=json"
    try:
        with urllib.request.urlopen(url, timeout=timeout_s) as response:
            config = json.loads(response.read())["vllm_config"]["weight_transfer_config"]
    except (urllib.error.URLError, OSError, ValueError, KeyError, TypeError):
        return False, None
    return True, None if config is None else str(config.get("backend"))


def check_weight_transfer(base_url: str, on_cuda: bool) -> None:
    """Refuse a server whose weight-transfer backend this trainer cannot join: TRL's NCCL path
    needs CUDA (vllm_client.py:756-760), gspo-trl's gloo path is the CPU trainer's."""
    known, backend = server_weight_backend(base_url)
    if not known:
        return
    where = f"vllm_mode: server, but the vLLM server at {base_url}"
    if backend is None:
        fix = GLOO_SERVER if not on_cuda else "`trl vllm-serve` (TRL's default NCCL backend)"
        raise RecipeError(
            f"{where} has no weight-transfer engine, so it would never get the trained weights: "
            f"restart it as {fix}"
        )
    if not on_cuda and backend != "gloo":
        raise RecipeError(
            f"{where} syncs weights over {backend!r}, which needs a CUDA trainer, and this trainer "
            "runs on CPU: "
            f"restart the server as {GLOO_SERVER}"
        )
    if on_cuda and backend == "gloo":
        raise RecipeError(
            f"{where} syncs weights over 'gloo' (gspo-trl's CPU backend), and this trainer runs on CUDA, "
            "which TRL syncs over NCCL: restart the server without --weight-transfer-config "
            "(TRL's default NCCL)"
        )


def _latest_checkpoint(output_dir: str) -> Path | None:
    found = [p for p in Path(output_dir).glob("checkpoint-*") if p.name.split("-")[-1].isdigit()]
    return max(found, key=lambda p: int(p.name.split("-")[-1]), default=None)


def _quiet_off_the_main_process() -> None:
    """On a rank other than 0, end with status 2 and say nothing: rank 0 says the one line (each
    rank saying it would print it once per rank)."""
    import os

    if int(os.environ.get("RANK", "0")) != 0:
        raise SystemExit(2)


@contextlib.contextmanager
def server_loss_in_one_line(args: Any) -> Iterator[None]:
    """A server-mode run whose server dies (a generate request or a weight sync cut off) ends in
    one `error:` line naming the server and the checkpoint left to resume from, not requests'
    retry traceback (TRL's client retries 5 times first, backoff 2 s: about a minute). A weight
    sync cut off raises from gloo's broadcast, a RuntimeError (torch's DistBackendError is one),
    and a rank waiting in a collective for a rank 0 that has ended does too: with the server gone
    from /health, both are the server's loss. Only rank 0 prints; the other ranks end quietly."""
    if not getattr(args, "use_vllm", False) or getattr(args, "vllm_mode", None) != "server":
        yield
        return
    import requests

    try:
        yield
    except VLLMServerLost:
        _quiet_off_the_main_process()
        raise
    except (requests.exceptions.RequestException, ConnectionError, RuntimeError) as error:
        base_url = server_base_url(args)
        if _answers(f"{base_url}/health", timeout_s=2.0) is None:
            raise  # the server is up: not a lost server, keep the real error
        _quiet_off_the_main_process()
        checkpoint = _latest_checkpoint(args.output_dir)
        kept = (
            f"checkpoint {checkpoint} is kept: restart the server, then run the same command with --resume"
            if checkpoint
            else "no checkpoint was saved yet (save_steps): restart the server and train again"
        )
        reason = str(error).split(" (Caused by ")[-1].rstrip("\"')").split(": ")[-1][:200]
        reason = " ".join(reason.split())
        raise VLLMServerLost(
            f"the vLLM server at {base_url} stopped answering during training ({reason}); {kept}"
        ) from None


def health_problem(base_url: str, timeout_s: float = CHECK_TIMEOUT_S) -> str | None:
    """None when the server at `base_url` answers its health check now, else why not (one phrase)."""
    return _answers(f"{base_url.rstrip('/')}/health", timeout_s)


# --- TRL's server request, for engine.overlap (gspo_trl/training/probes/overlap.py) ------------------
def server_sampling_params(generation: Any, num_generations: int) -> dict[str, Any]:
    """What TRL's server-mode generate sends with the prompts, built from the same attributes
    (`temperature = self.temperature` ... `max_completion_length = self.max_completion_length`,
    trl/generation/vllm_generation.py:581-587) into the same dict (`sampling_params = {"n":
    num_generations, ... "generation_kwargs": self.generation_kwargs}`, :615-626)."""
    return {
        "n": num_generations,
        "repetition_penalty": generation.repetition_penalty,
        "temperature": generation.temperature,
        "top_p": generation.top_p,
        "top_k": generation.top_k,
        "min_p": 0.0 if generation.min_p is None else generation.min_p,
        "max_tokens": generation.max_completion_length,
        "logprobs": generation.logprobs,
        "structured_outputs_regex": generation.structured_outputs_regex,
        "generation_kwargs": generation.generation_kwargs,
    }


def server_generate(generation: Any, all_prompt_ids: list[list[int]], num_generations: int) -> tuple:
    """TRL's request alone, without its collectives (safe off the main thread): every process's
    prompts, one per group (`ordered_set_of_prompt_ids = all_prompts[::num_generations]`, :603), to
    `self.vllm_client.generate(prompts=ordered_set_of_prompt_ids, features=features, **sampling_params)`
    (:628-630); the payload TRL broadcasts (:631-636)."""
    output = generation.vllm_client.generate(
        prompts=all_prompt_ids[::num_generations],
        features=None,
        **server_sampling_params(generation, num_generations),
    )
    return output["prompt_ids"], output["completion_ids"], output["logprobs"], output.get("logprob_token_ids")


def process_share(payload: tuple, process_index: int, rows: int, num_generations: int) -> tuple:
    """This process's rows of the payload, as TRL slices them after its broadcast (:641-654)."""
    all_prompt_ids, completion_ids, logprobs, logprob_token_ids = payload
    all_prompt_ids = [ids for ids in all_prompt_ids for _ in range(num_generations)]
    share = slice(process_index * rows, (process_index + 1) * rows)
    return (
        all_prompt_ids[share],
        completion_ids[share],
        logprobs[share] if logprobs is not None else None,
        logprob_token_ids[share] if logprob_token_ids is not None else None,
    )
