"""The installed vLLM and TRL lines docs/vllm.md's Model Runner V2 table and server mode (and docs/moe.md,
gspo_trl/plan/vllm_memory.py, gspo_trl/config/sections/moe.py) quote: a GPU path the CPU tests
cannot run (issue 34 item 9), held to its source so that an upgrade that moves it fails here."""

from __future__ import annotations

import importlib.util
from pathlib import Path

import pytest

# (package, file, first line, last line, text that must be in those lines)
QUOTED = [
    ("vllm", "config/vllm.py", 746, 750, "Model Runner V2 requires Triton; using the V1 model runner"),
    ("vllm", "config/vllm.py", 1169, 1175, "AuxOutput Connector requires Model Runner V2"),
    ("vllm", "config/vllm.py", 1180, 1181, "AuxOutput Connector requires prefix caching"),
    ("vllm", "v1/worker/cpu_model_runner.py", 18, 23, "class CPUModelRunner(GPUModelRunner)"),
    ("vllm", "v1/worker/cpu_worker.py", 179, 185, "sleep mode is not supported on CPU, ignore it."),
    ("vllm", "v1/worker/gpu_worker.py", 540, 540, 'self._maybe_get_memory_pool_context(tag="weights")'),
    ("vllm", "v1/worker/gpu_worker.py", 813, 813, 'self._maybe_get_memory_pool_context(tag="kv_cache")'),
    ("vllm", "v1/worker/gpu_worker.py", 881, 883, "self.model_runner.capture_model()"),
    ("vllm", "v1/worker/gpu/model_runner.py", 379, 379, "self.model = model_loader.load_model("),
    ("vllm", "v1/worker/gpu/model_runner.py", 460, 460, '"logprobs_mode": self.model_config.logprobs_mode'),
    ("vllm", "v1/worker/gpu/model_runner.py", 499, 499, "logprobs_mode=self.model_config.logprobs_mode"),
    ("vllm", "distributed/aux_output_connector/worker.py", 110, 113, "if not get_tp_group().is_first_rank:"),
    (
        "vllm",
        "distributed/aux_output_connector/connector.py",
        107,
        109,
        "auxiliary output worker output is missing",
    ),
    ("vllm", "entrypoints/serve/instrumentator/basic.py", 53, 56, '@router.get("/version")'),
    ("trl", "generation/vllm_generation.py", 355, 355, 'distributed_executor_backend="external_launcher"'),
    ("trl", "generation/vllm_generation.py", 361, 361, 'logprobs_mode="processed_logprobs"'),
    ("trl", "generation/vllm_generation.py", 366, 366, "self.llm.sleep(level=2)"),
    (
        "trl",
        "generation/vllm_generation.py",
        511,
        511,
        "driver_worker.model_runner.model.load_weights([(name, param)])",
    ),
    ("trl", "generation/vllm_generation.py", 516, 517, "self.llm.reset_prefix_cache()"),
    ("trl", "generation/vllm_client.py", 743, 743, "world_size = self.get_world_size() + 1"),
    # docs/vllm.md, "Several ranks, one server": rank 0 alone talks to the server
    ("trl", "generation/vllm_generation.py", 300, 309, "self.vllm_client.init_communicator("),
    ("trl", "generation/vllm_generation.py", 504, 508, "take part in the gather collectives"),
    ("trl", "generation/vllm_generation.py", 478, 478, "with self._dist.gather_params([param]):"),
    ("trl", "generation/vllm_generation.py", 594, 594, "all_prompts = gather_object(prompts)"),
    ("trl", "generation/vllm_generation.py", 601, 601, "if accelerator.is_main_process:"),
    ("trl", "generation/vllm_generation.py", 644, 644, "broadcast_object_list(obj_list, from_process=0)"),
    ("trl", "generation/vllm_generation.py", 651, 651, "process_slice = slice("),
    ("trl", "generation/vllm_generation.py", 447, 448, "model.merge_adapter()"),
    ("trl", "generation/vllm_generation.py", 469, 469, "model.unmerge_adapter()"),
    ("trl", "generation/vllm_client.py", 310, 318, '/server_info"'),
    ("trl", "generation/vllm_client.py", 756, 760, "needs a CUDA device"),
]


def _source(package: str, relative: str) -> list[str]:
    spec = importlib.util.find_spec(package)
    if spec is None or spec.origin is None:
        pytest.skip(f"{package} is not installed")
    path = Path(spec.origin).parent / relative
    if not path.is_file():
        pytest.fail(f"{package}/{relative} is gone: re-read what docs/vllm.md quotes from it")
    return path.read_text(encoding="utf-8").splitlines()


@pytest.mark.parametrize(("package", "relative", "first", "last", "text"), QUOTED)
def test_quoted_line_is_where_the_docs_say(package, relative, first, last, text):
    lines = _source(package, relative)
    assert text in "\n".join(lines[first - 1 : last]), (
        f"{package}/{relative}:{first}-{last} no longer says {text!r}"
    )
