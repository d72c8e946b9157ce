"""Looking at GSPO runs: clip-range calibration, engine/trainer log-prob checks, PNG reports."""
