"""GSPOTrainer's probes: one concern each (diagnostics, engine log-probs, routing, perf, staged
checkpoints), told of every TRL event by the trainer in list order (probes.base)."""
