"""What keeps a run's work: staged checkpoints, clean interrupts, checked rewards, quiet resumes."""
