"""A model's size in numbers: its architecture from config.json (`shape`), its training FLOPs
(`flops`) and the published rates of the GPUs that run them (`gpu_rates`).
"""
