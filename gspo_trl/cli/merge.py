"""`gspo-trl merge RUN_OR_ADAPTER OUT`: a LoRA run's adapter merged into its base model.

The result is a whole model (config.json + weights + tokenizer) that vLLM, `gspo-trl eval`
and `from_pretrained` load like any other. RUN_OR_ADAPTER is an adapter folder (holding
adapter_config.json) or a LoRA run's output_dir (its final adapter, else its newest
checkpoint-N). The base model is the one adapter_config.json names, unless --base is given.

Arguments and printing only; the work is done by gspo_trl.model.loading.adapters.
"""

from __future__ import annotations

import sys
from collections.abc import Sequence
from pathlib import Path

from gspo_trl.core.arguments import ArgumentParser
from gspo_trl.model.loading.adapters import base_model_of, find_adapter, folder_size, merge_adapter


def main(argv: Sequence[str] | None = None) -> int:
    parser = ArgumentParser(prog="gspo-trl merge", description=__doc__.split("\n\n")[0])
    parser.add_argument("run_or_adapter", help="an adapter folder or a LoRA run's output_dir")
    parser.add_argument("output", type=Path, help="folder for the merged model")
    parser.add_argument("--base", help="base model (default: adapter_config.json's base_model_name_or_path)")
    args = parser.parse_args(sys.argv[1:] if argv is None else argv)
    adapter = find_adapter(args.run_or_adapter)
    base = args.base or base_model_of(adapter)
    merge_adapter(adapter, args.output, base)
    print(f"wrote the merged model to {args.output} ({folder_size(args.output)})")
    print(f"  adapter {adapter} on base {base}; the base model is unchanged")
    return 0
