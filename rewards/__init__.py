"""The verifier library: reward functions in TRL's calling convention, and their registry."""
