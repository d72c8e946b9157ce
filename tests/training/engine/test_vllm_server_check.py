"""A server-mode recipe fails at train start, in seconds, when no vLLM server answers.

The health check (gspo_trl.training.engine.vllm_server) runs in build_trainer before the model loads.
The server side is a real HTTP server on 127.0.0.1 answering `/health` as vLLM does.
"""

from __future__ import annotations

import http.server
import json
import socket
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from gspo_trl.config.recipe import load_recipe
from gspo_trl.config.shipped import RECIPES_DIR
from gspo_trl.core.errors import RecipeError
from gspo_trl.training.build import build_trainer, gspo_config
from gspo_trl.training.engine.vllm_server import check_vllm_server
from gspo_trl.training.trainer import GSPOTrainer  # noqa: F401 (warm: time the check, not a cold TRL import)


def _closed_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return sock.getsockname()[1]


class _Health(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:
        self.send_response(200 if self.path.rstrip("/") == "/health" else 404)
        self.end_headers()

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def health_server() -> Iterator[int]:
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Health)
    thread = threading.Thread(target=server.serve_forever, daemon=True)
    thread.start()
    yield server.server_address[1]
    server.shutdown()
    server.server_close()


def _server_recipe(tmp_path: Path, **server: object):
    overrides = {"use_vllm": True, "vllm_mode": "server", "output_dir": str(tmp_path / "run"), **server}
    return load_recipe(RECIPES_DIR / "tiny" / "reversal.yaml", overrides)


def test_train_start_without_a_server_fails_fast_naming_the_keys(tmp_path: Path) -> None:
    port = _closed_port()
    recipe = _server_recipe(tmp_path, vllm_server_host="127.0.0.1", vllm_server_port=port)
    started = time.monotonic()
    with pytest.raises(RecipeError) as error:
        build_trainer(recipe)
    assert time.monotonic() - started < 15  # the check waits 5 s; preflight shares 2 busy cores
    message = str(error.value)
    for words in ("vllm_mode: server", "vllm_server_host: 127.0.0.1", f"vllm_server_port: {port}"):
        assert words in message
    assert "trl vllm-serve --model" in message and "--host 0.0.0.0" in message
    assert not (tmp_path / "run").exists()  # nothing was built


@pytest.mark.parametrize("style", ["host_port", "base_url"])
def test_a_server_answering_health_passes(tmp_path: Path, health_server: int, style: str) -> None:
    server = (
        {"vllm_server_host": "127.0.0.1", "vllm_server_port": health_server}
        if style == "host_port"
        else {"vllm_server_base_url": f"http://127.0.0.1:{health_server}/"}
    )
    check_vllm_server(gspo_config(_server_recipe(tmp_path, **server)))


def test_base_url_is_named_when_it_is_what_is_wrong(tmp_path: Path) -> None:
    url = f"http://127.0.0.1:{_closed_port()}"
    with pytest.raises(RecipeError, match="vllm_server_base_url: " + url):
        check_vllm_server(gspo_config(_server_recipe(tmp_path, vllm_server_base_url=url)), timeout_s=1)


def test_colocate_and_plain_runs_ask_no_server() -> None:
    for recipe in ("tiny/reversal.yaml", "qwen3-4b/math.yaml"):
        check_vllm_server(gspo_config(load_recipe(RECIPES_DIR / recipe)), timeout_s=0.1)


@pytest.mark.parametrize("config", ["zero3.yaml", "fsdp2.yaml"])
def test_config_launch_lines_run_without_a_separate_server(config: str) -> None:
    """The one-node launch line in each accelerate config's header must work as written."""
    from gspo_trl.config.shipped import CONFIGS_DIR

    header = [line for line in (CONFIGS_DIR / config).read_text().splitlines() if line.startswith("#")]
    launched = [word for line in header for word in line.split() if word.startswith("recipes/")]
    assert launched, f"{config}: no recipe in the launch line"
    for recipe in launched:
        training = load_recipe(RECIPES_DIR / recipe.removeprefix("recipes/")).training
        assert training.get("vllm_mode") != "server", f"{config} launches {recipe}, which needs a vLLM server"


class _VersionedServer(http.server.BaseHTTPRequestHandler):
    """vLLM's server as `trl vllm-serve` runs it: `/health`, and `/version` as
    vllm/entrypoints/serve/instrumentator/basic.py:53-56 answers it."""

    version = "0.31.0"

    def do_GET(self) -> None:
        path = self.path.rstrip("/")
        body = json.dumps({"version": self.version}).encode() if path == "/version" else b""
        self.send_response(200 if path in ("/health", "/version") else 404)
        self.end_headers()
        self.wfile.write(body)

    def log_message(self, *args: object) -> None:
        pass


@pytest.mark.parametrize(("version", "refused"), [("0.24.0", True), ("0.31.0", False)])
def test_the_servers_own_vllm_is_checked_for_a_moe_model(tmp_path: Path, version: str, refused: bool) -> None:
    """Issue 34 item 8: the server's vLLM loads TRL's synced experts, so its version (asked at
    train start) decides, not the trainer's; the model's config comes from the package's shipped
    copy when the hub cache has none (Qwen/Qwen3-30B-A3B: 128 experts)."""
    handler = type("Handler", (_VersionedServer,), {"version": version})
    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    try:
        args = gspo_config(
            _server_recipe(tmp_path, vllm_server_base_url=f"http://127.0.0.1:{server.server_address[1]}")
        )
        check_vllm_server(args, model="Qwen/Qwen3-8B")  # dense: any version
        if refused:
            with pytest.raises(
                RecipeError, match=r"is a mixture of experts \(128\).*vLLM 0.24.0 is installed"
            ):
                check_vllm_server(args, model="Qwen/Qwen3-30B-A3B")
        else:
            check_vllm_server(args, model="Qwen/Qwen3-30B-A3B")
    finally:
        server.shutdown()
        server.server_close()


def test_a_server_lost_mid_run_is_one_line_naming_it_and_the_checkpoint_kept(tmp_path: Path) -> None:
    """requests' own ConnectionError from a refused port (what TRL's client raises once its
    retries are spent) becomes one line; the real run: scripts/check_server_mode.py `death`."""
    import requests

    from gspo_trl.core.errors import VLLMServerLost
    from gspo_trl.training.engine.vllm_server import server_loss_in_one_line

    url = f"http://127.0.0.1:{_closed_port()}"
    args = gspo_config(_server_recipe(tmp_path, vllm_server_base_url=url))
    (tmp_path / "run" / "checkpoint-2").mkdir(parents=True)
    (tmp_path / "run" / "checkpoint-10").mkdir()
    with pytest.raises(VLLMServerLost) as lost, server_loss_in_one_line(args):
        requests.post(f"{url}/v1/completions", json={}, timeout=5)
    message = str(lost.value)
    assert "\n" not in message and f"the vLLM server at {url} stopped answering" in message
    assert "Connection refused" in message and "checkpoint-10 is kept" in message and "--resume" in message


def test_a_request_error_while_the_server_answers_keeps_its_own_error(
    tmp_path: Path, health_server: int
) -> None:
    import requests

    from gspo_trl.training.engine.vllm_server import server_loss_in_one_line

    url = f"http://127.0.0.1:{health_server}"
    args = gspo_config(_server_recipe(tmp_path, vllm_server_base_url=url))
    with pytest.raises(requests.exceptions.ConnectionError), server_loss_in_one_line(args):
        raise requests.exceptions.ConnectionError("one dropped connection")
