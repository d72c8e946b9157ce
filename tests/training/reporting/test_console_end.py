"""A run's last lines: the final held-out score, then `done:` and where the time went.

The Trainer logs `train_runtime` before it calls the callbacks' on_train_end, where the held-out
callback measures the final score; the console printed `done:` at that log, so on main the final
`held-out` line came after it. The console now prints its end lines when the run is over
(`close()`, which ConsoleProbe calls after every callback's on_train_end)."""

from __future__ import annotations

from transformers import TrainerControl, TrainerState, TrainingArguments

from gspo_trl.training.reporting.console_lines import ConsoleCallback


def test_the_final_heldout_line_comes_before_done(tmp_path) -> None:
    printed: list[str] = []
    console = ConsoleCallback("banner", printer=lambda text, flush: printed.append(text))
    args = TrainingArguments(output_dir=str(tmp_path), report_to="none", use_cpu=True)
    state, control = TrainerState(max_steps=4, global_step=4), TrainerControl()
    console.on_train_begin(args, state, control)
    console.on_log(args, state, control, logs={"loss": 0.1, "reward": 0.5})
    console.on_log(
        args, state, control, logs={"train_runtime": 12.0, "train_loss": 0.1}
    )  # Trainer.train's end
    console.on_log(args, state, control, logs={"heldout/score": 0.75})  # the held-out callback's on_train_end
    console.close()  # ConsoleProbe.on_train_end, after Trainer.train returned
    ends = [i for i, line in enumerate(printed) if line.startswith(("done:", "step 4/4 | held-out"))]
    assert [printed[i].split(" |")[0] for i in ends] == ["step 4/4", "done: 4 steps in 12s"], printed
    assert printed[-1].startswith("done: 4 steps"), printed
