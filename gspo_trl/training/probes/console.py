"""The console and OUTPUT_DIR/metrics.jsonl as a probe (gspo_trl.training.reporting.console_lines says
what is printed). Their callbacks run ahead of transformers' and the trackers': the banner and a
fresh metrics.jsonl come before the held-out score logged at step 0. The console lets go of the
alarm loggers at train end, after every callback's on_train_end (the final held-out score
included), also when training raised."""

from __future__ import annotations

from typing import Any

from trl.trainer.utils import get_config_model_id

from gspo_trl.training.probes.base import Probe, ProbeCallbacks
from gspo_trl.training.reporting.console_lines import ConsoleCallback, banner, remove_trl_printing
from gspo_trl.training.reporting.metrics_file import MetricsFileCallback


class ConsoleProbe(Probe):
    """Replaces TRL's dict printing and progress bar with the console; writes metrics.jsonl.

    What the banner names (model, rewards, held-out rows) defaults to what the trainer holds:
    GSPOTrainer adds this probe itself when none is given (the Python API gets the CLI's console)."""

    def __init__(
        self,
        model_name: str | None = None,
        reward_names: list[str] | None = None,
        eval_rows: int | None = None,
    ) -> None:
        self.model_name, self.reward_names, self.eval_rows = model_name, reward_names, eval_rows
        self.console: ConsoleCallback | None = None
        self.metrics_file: MetricsFileCallback | None = None

    def attach(self, trainer: Any) -> None:
        remove_trl_printing(trainer)
        self.console = ConsoleCallback(
            self.header(trainer), alarm_loggers=trainer.probes.alarm_loggers(), probes=trainer.probes
        )
        self.metrics_file = MetricsFileCallback(trainer.args.output_dir)

    def header(self, trainer: Any) -> str:
        """The start banner: the console's lines and each probe's `banner_lines`."""
        model_name = self.model_name or get_config_model_id(trainer.model.config)
        reward_names = self.reward_names if self.reward_names is not None else trainer.reward_func_names
        eval_rows = self.eval_rows
        if eval_rows is None:
            rows = trainer.eval_dataset
            eval_rows = len(rows) if rows is not None and hasattr(rows, "__len__") else 0
        return banner(trainer, model_name, list(reward_names), eval_rows)

    def callbacks(self) -> ProbeCallbacks:
        return ProbeCallbacks(before_reporting=[self.console, self.metrics_file])

    def on_train_end(self, trainer: Any) -> None:
        self.console.close()
        self.metrics_file.close()


def install_console(
    trainer: Any, model_name: str, reward_names: list[str], eval_rows: int = 0
) -> ConsoleCallback:
    """Name the model, rewards and held-out rows in a built GSPOTrainer's console (its ConsoleProbe,
    added by `GSPOTrainer.add_probe` when it has none); its ConsoleCallback."""
    probe = trainer.probes.find(ConsoleProbe)
    if probe is None:
        probe = ConsoleProbe(model_name, reward_names, eval_rows)
        trainer.add_probe(probe)
        return probe.console
    probe.model_name, probe.reward_names, probe.eval_rows = model_name, reward_names, eval_rows
    probe.console.header = probe.header(trainer)
    return probe.console
