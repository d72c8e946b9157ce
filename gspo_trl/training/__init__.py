"""Training: `GSPOConfig`, `GSPOTrainer` and its diagnostics, preflight, and the run (build.py).

Sub-packages, one concern each: `heldout` (scoring a held-out split during training),
`engine` (vLLM as pi_old, its mismatch check, the server health check), `reporting` (the
console, metrics.jsonl, step bars) and `safety` (staged checkpoints, interrupts, reward checks).
"""
