"""Models, by concern: `sizing` (architecture numbers, FLOPs, GPU rates), `tiny` (the CPU
models built locally), `loading` (settings, dtype, hub, checkpoints, adapters), `routing`
(mixture-of-experts routing: hooks, families, the engine's routing), `vllm_cpu` (vLLM on CPU)
and `prompts` (prompt token ids rendered as TRL renders them).
"""
