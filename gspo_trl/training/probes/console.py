"""The console and OUTPUT_DIR/metrics.jsonl as a probe (gspo_trl.training.reporting.console says
what is printed). Their callbacks run ahead of transformers' and the trackers': the banner and a
fresh metrics.jsonl come before the held-out score logged at step 0. The console lets go of the
alarm loggers at train end, after every callback's on_train_end (the final held-out score
included), also when training raised."""

from __future__ import annotations

from typing import Any

from gspo_trl.training.probes.base import Probe, ProbeCallbacks
from gspo_trl.training.reporting.console import ConsoleCallback, banner, remove_trl_printing
from gspo_trl.training.reporting.metrics_file import MetricsFileCallback


class ConsoleProbe(Probe):
    """Replaces TRL's dict printing and progress bar with the console; writes metrics.jsonl."""

    def __init__(self, model_name: str, reward_names: list[str], eval_rows: int = 0) -> None:
        self.model_name, self.reward_names, self.eval_rows = model_name, reward_names, eval_rows
        self.console: ConsoleCallback | None = None
        self.metrics_file: MetricsFileCallback | None = None

    def attach(self, trainer: Any) -> None:
        remove_trl_printing(trainer)
        header = banner(trainer, self.model_name, self.reward_names, self.eval_rows)
        perf = getattr(trainer, "perf", None)
        if perf is not None:  # the plan's FLOP floor beside what the step line will show
            header += "\n" + perf.ceiling_line(trainer.args.max_completion_length)
        self.console = ConsoleCallback(header)
        self.metrics_file = MetricsFileCallback(trainer.args.output_dir)

    def callbacks(self) -> ProbeCallbacks:
        return ProbeCallbacks(before_reporting=[self.console, self.metrics_file])

    def on_train_end(self, trainer: Any) -> None:
        self.console.close()


def install_console(
    trainer: Any, model_name: str, reward_names: list[str], eval_rows: int = 0
) -> ConsoleCallback:
    """Add the console probe to a built GSPOTrainer (`GSPOTrainer.add_probe`); its ConsoleCallback."""
    probe = ConsoleProbe(model_name, reward_names, eval_rows)
    trainer.add_probe(probe)
    return probe.console
