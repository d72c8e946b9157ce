"""The `gspo-trl` command: one subcommand per job, each living in its own module.

Subcommands are looked up lazily, so `gspo-trl rewards list` does not import torch and a
subcommand whose optional dependency is missing fails alone, with its own message.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": ("gspo_trl.train", "train a recipe: gspo-trl train RECIPE.yaml [--resume] [--key value ...]"),
    "validate": (
        "gspo_trl.validate_cli",
        "check a recipe (keys, GSPO settings, rewards, data) without training",
    ),
    "demo": ("gspo_trl.demo", "the CPU demo: tiny model, warm start, GSPO, held-out accuracy, plot"),
    "tiny-model": (
        "gspo_trl.tiny_cli",
        "build the tiny CPU model and tokenizer: gspo-trl tiny-model OUT_DIR",
    ),
    "rewards": ("rewards.cli", "list the reward functions: gspo-trl rewards list"),
    "calibrate": ("gspo_trl.calibrate", "measure log s_i on a recipe's first batches and suggest eps"),
    "report": ("gspo_trl.report", "PNG plots of a run: gspo-trl report RUN_DIR"),
    "check-logprobs": ("gspo_trl.check_logprobs", "compare vLLM's log-probs with the trainer's"),
    "filter": ("gspo_trl.filter", "keep prompts whose pass rate lies in a range"),
    "eval": ("gspo_trl.evaluate", "pass@k of a model or run on a held-out set"),
}


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = ["usage: gspo-trl COMMAND [ARGS ...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()]
    lines += ["", "`gspo-trl COMMAND --help` for a command's options."]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if not argv or argv[0] in ("-h", "--help", "help"):
        print(usage())
        return 0
    command, rest = argv[0], argv[1:]
    if command not in SUBCOMMANDS:
        print(f"error: unknown command {command!r}\n\n{usage()}", file=sys.stderr)
        return 2
    module_name = SUBCOMMANDS[command][0]
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            print(f"error: `gspo-trl {command}` is not available in this version", file=sys.stderr)
            return 2
        raise
    return int(module.main(rest) or 0)


if __name__ == "__main__":
    sys.exit(main())
