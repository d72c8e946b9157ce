"""Models: loading settings, the tiny CPU model, checkpoints, and the vLLM-on-CPU shim."""
