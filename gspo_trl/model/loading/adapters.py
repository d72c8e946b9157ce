"""LoRA runs: find a PEFT adapter, and merge it into its base model so it loads like any model.

A recipe with `model.lora` saves an adapter (adapter_config.json + adapter weights, no
config.json) into its output_dir and checkpoints. vLLM and `AutoModelForCausalLM` want a
whole model, so `gspo-trl merge` (and `eval` / `filter`, given an adapter) load the base
model named in adapter_config.json, apply the adapter with peft and `merge_and_unload()` it:
W + (alpha / r) * B @ A, the weights the adapter computes with, in one matrix.
"""

from __future__ import annotations

import json
import logging
from pathlib import Path

from gspo_trl.core.errors import ModelNotFoundError
from gspo_trl.model.loading.checkpoints import latest_checkpoint
from gspo_trl.model.loading.hub import hub_model_errors

logger = logging.getLogger(__name__)

ADAPTER_CONFIG = "adapter_config.json"
MERGED_DIR = "merged"
"""`eval` / `filter` merge an adapter into ADAPTER_DIR/merged once and reuse it after (and say
so: it is a whole model's weights, written into the run folder)."""


MERGE_INPUTS = ("adapter_", "tokenizer", "special_tokens", "chat_template", "vocab", "merges")
"""Name prefixes of the files a merge reads: the adapter's and the tokenizer's."""


def is_adapter_dir(path: str | Path) -> bool:
    """A PEFT adapter folder: adapter_config.json and no full model config.json."""
    path = Path(path)
    return (path / ADAPTER_CONFIG).is_file() and not (path / "config.json").is_file()


def find_adapter(run_or_adapter: str | Path) -> Path:
    """The adapter folder itself, else the newest checkpoint-N of a run that holds one."""
    path = Path(run_or_adapter)
    if is_adapter_dir(path):
        return path
    checkpoint = latest_checkpoint(path, needs=ADAPTER_CONFIG) if path.is_dir() else None
    if checkpoint is not None:
        return checkpoint
    raise ModelNotFoundError(
        f"{str(path)!r}: no PEFT adapter ({ADAPTER_CONFIG}) in it or in its checkpoint-N folders; "
        "`gspo-trl merge` is for runs with model.lora"
    )


def base_model_of(adapter_dir: str | Path) -> str:
    """The base model the adapter was trained on, as adapter_config.json names it."""
    config = json.loads((Path(adapter_dir) / ADAPTER_CONFIG).read_text())
    base = config.get("base_model_name_or_path")
    if not base:
        raise ModelNotFoundError(f"{adapter_dir}/{ADAPTER_CONFIG}: no base_model_name_or_path")
    return str(base)


def merge_adapter(adapter_dir: str | Path, output_dir: str | Path, base: str | None = None) -> Path:
    """Base model + adapter, merged and saved (with the tokenizer) to `output_dir`."""
    from peft import PeftModel
    from transformers import AutoModelForCausalLM, AutoTokenizer

    adapter_dir, output_dir = Path(adapter_dir), Path(output_dir)
    base = base or base_model_of(adapter_dir)
    try:
        with hub_model_errors(base, "--base"):
            model = AutoModelForCausalLM.from_pretrained(base, dtype="auto")
    except OSError as error:
        raise ModelNotFoundError(
            f"base model {base!r} of adapter {str(adapter_dir)!r}: cannot load it "
            f"({str(error).splitlines()[0]}); give it with --base"
        ) from error
    merged = PeftModel.from_pretrained(model, str(adapter_dir)).merge_and_unload()
    merged.save_pretrained(output_dir)
    tokenizer_source = adapter_dir if (adapter_dir / "tokenizer_config.json").is_file() else base
    with hub_model_errors(str(tokenizer_source), "--base"):
        tokenizer = AutoTokenizer.from_pretrained(tokenizer_source)
    tokenizer.save_pretrained(output_dir)
    return output_dir


def folder_size(path: str | Path) -> str:
    """The bytes of the files under `path`, in MB or GB (a merged model is a whole model's weights)."""
    total = sum(p.stat().st_size for p in Path(path).rglob("*") if p.is_file())
    return f"{total / 1e9:.1f} GB" if total >= 1e9 else f"{total / 1e6:.1f} MB"


def loadable_model(model_or_run: str) -> str:
    """`model_or_run` unchanged, unless it is an adapter (or a LoRA run's output_dir): then the
    merged model, made once under ADAPTER/merged and reused while newer than the adapter."""
    path = Path(model_or_run)
    if not path.is_dir() or (path / "config.json").is_file():
        return model_or_run
    try:
        adapter = find_adapter(path)
    except ModelNotFoundError:
        return model_or_run  # not a LoRA run: the caller's own resolution reports what it is
    merged = adapter / MERGED_DIR
    # The merge's inputs only: eval writes eval_results.json into this folder, which must not
    # make the next eval merge again.
    inputs = [p for p in adapter.iterdir() if p.is_file() and p.name.startswith(MERGE_INPUTS)]
    newest_input = max(p.stat().st_mtime for p in inputs)
    if not (merged / "config.json").is_file() or (merged / "config.json").stat().st_mtime < newest_input:
        merge_adapter(adapter, merged)
        done = "merged it into its base model and wrote the whole model to"
    else:
        done = "using the whole model merged from it earlier, in"
    logger.info(
        "%s is a LoRA adapter: %s %s (%s; kept for the next eval while newer than the adapter, "
        "delete it to free the space)",
        adapter,
        done,
        merged,
        folder_size(merged),
    )
    return str(merged)
