"""The tiny models built locally for CPU runs: a Qwen3-style dense model and its tokenizer
(`dense`) and a Qwen3-MoE (`moe`).
"""
