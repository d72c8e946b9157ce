"""The `gspo-trl` command: one subcommand per module, errors and logging handled here once.

Subcommands are imported lazily, so `gspo-trl rewards list` does not import torch and a
subcommand whose optional dependency is missing fails alone, with its own message. Every
subcommand's `main(argv)` raises a `UserError` (gspo_trl.core.errors) for bad input; this module
prints it on one line and returns 2, without a traceback.
"""

from __future__ import annotations

import importlib
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence

from gspo_trl.cli.quiet import quiet_third_party_noise

SUBCOMMANDS: dict[str, tuple[str, str]] = {
    "train": (
        "gspo_trl.train",
        "train a recipe: gspo-trl train RECIPE.yaml [--resume | --overwrite] [--key value ...]",
    ),
    "validate": (
        "gspo_trl.cli.validate",
        "check a recipe (keys, GSPO settings, rewards, data) without training",
    ),
    "recipes": (
        "gspo_trl.cli.recipes",
        "the shipped recipes and configs: gspo-trl recipes list | copy NAME DEST",
    ),
    "demo": ("gspo_trl.cli.demo", "the CPU demo: tiny model, warm start, GSPO, held-out accuracy, plot"),
    "tiny-model": (
        "gspo_trl.cli.tiny_model",
        "build the tiny CPU model and tokenizer: gspo-trl tiny-model OUT_DIR",
    ),
    "rewards": ("gspo_trl.rewards.cli", "list the reward functions: gspo-trl rewards list"),
    "calibrate": ("gspo_trl.cli.calibrate", "measure log s_i on a recipe's first batches and suggest eps"),
    "report": ("gspo_trl.cli.report", "PNG plots of a run: gspo-trl report RUN_DIR"),
    "check-logprobs": ("gspo_trl.cli.check_logprobs", "compare vLLM's log-probs with the trainer's"),
    "filter": ("gspo_trl.cli.filter", "keep prompts whose pass rate lies in a range"),
    "eval": ("gspo_trl.cli.eval", "pass@k of a model or run on a held-out set"),
    "plan": ("gspo_trl.cli.plan", "will a recipe fit its GPUs: memory per GPU, verdict, first fix, cost"),
    "merge": ("gspo_trl.cli.merge", "merge a LoRA run's adapter into its base model: gspo-trl merge RUN OUT"),
}
LOG_FORMAT = "%(asctime)s %(levelname)s %(name)s: %(message)s"


def usage() -> str:
    width = max(map(len, SUBCOMMANDS))
    lines = ["usage: gspo-trl COMMAND [ARGS ...]", "", "commands:"]
    lines += [f"  {name:<{width}}  {summary}" for name, (_, summary) in SUBCOMMANDS.items()]
    lines += ["", "`gspo-trl COMMAND --help` for a command's options."]
    return "\n".join(lines)


LIBRARY_BAR_SWITCHES = ("HF_HUB_DISABLE_PROGRESS_BARS", "HF_DATASETS_DISABLE_PROGRESS_BARS")
"""Environment switches of the Hugging Face libraries' bars (hub downloads, transformers'
weight loading and saving, datasets' map): read when each library is first imported."""


def quiet_library_bars_off_a_terminal() -> None:
    """Off a terminal (a log file, a Slurm job, CI) the libraries' bars write a line per update
    into the log; turn them off there, as gspo_trl.core.progress does for ours. A switch the user
    set stays as set. Called before a subcommand's module is imported, and again by
    run_command for `accelerate launch -m gspo_trl.train`."""
    if not sys.stderr.isatty():
        for switch in LIBRARY_BAR_SWITCHES:
            os.environ.setdefault(switch, "1")


def shown_by_its_library(record: logging.LogRecord) -> bool:
    """True when a logger below the root already printed `record`: huggingface_hub and datasets
    give their root logger its own StreamHandler and still propagate, so without this filter on
    our handler each of their warnings (the hub's retry lines) is printed twice."""
    logger: logging.Logger | None = logging.getLogger(record.name)
    while logger is not None and logger is not logging.root:
        if logger.handlers:
            return True
        if not logger.propagate:
            return False
        logger = logger.parent
    return False


class OncePerRecord(logging.Filter):
    """Drops what `shown_by_its_library` says was printed already."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not shown_by_its_library(record)


def setup_logging() -> None:
    """INFO and up on stderr in LOG_FORMAT, each record once (OncePerRecord). Handlers the root
    logger has already (pytest's, an embedding program's) are left as they are."""
    if logging.root.handlers:
        return
    logging.basicConfig(level=logging.INFO, format=LOG_FORMAT)
    for handler in logging.root.handlers:
        handler.addFilter(OncePerRecord())


def run_command(name: str, main: Callable[[list[str]], int | None], argv: Sequence[str]) -> int:
    """Run one subcommand's `main`: logging set up once, user errors as one line and exit 2."""
    from gspo_trl.core.errors import USER_ERRORS

    setup_logging()
    quiet_library_bars_off_a_terminal()
    quiet_third_party_noise()
    try:
        status = int(main(list(argv)) or 0)
        sys.stdout.flush()  # a reader that went away shows here, not as an error at exit
        return status
    except BrokenPipeError:  # `gspo-trl plan ... | head`: stop quietly, as Unix tools do
        return closed_stdout()
    except USER_ERRORS as error:
        lines = getattr(error, "lines", None) or [str(error)]  # RecipeProblems: one line per problem
        for line in lines:
            print(f"error: {line}", file=sys.stderr)
        if len(lines) > 1:
            print(f"gspo-trl {name}: {len(lines)} problems; fix them all, then run again", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        print(f"gspo-trl {name}: interrupted", file=sys.stderr)
        return 130


def closed_stdout() -> int:
    """The reader of stdout closed the pipe: point stdout at /dev/null (Python's exit flushes it
    again) and exit as a program killed by SIGPIPE does, 128 + 13, without a traceback."""
    devnull = os.open(os.devnull, os.O_WRONLY)
    os.dup2(devnull, sys.stdout.fileno())
    os.close(devnull)
    return 128 + signal.SIGPIPE


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
    quiet_library_bars_off_a_terminal()  # before the subcommand's module imports the libraries
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as error:
        if error.name and module_name.startswith(error.name):
            print(f"error: `gspo-trl {command}` is not available in this version", file=sys.stderr)
            return 2
        raise
    return run_command(command, module.main, rest)


if __name__ == "__main__":
    sys.exit(main())
