"""The inference engine in a run: vLLM log-probs as pi_old, their mismatch check, the server check."""
