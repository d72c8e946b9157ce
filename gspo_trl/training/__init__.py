"""Training: GSPOConfig and GSPOTrainer, diagnostics, held-out scoring, and the run itself."""
