"""Loading a model: the recipe's `model:` settings (`settings`), the weights' dtype
(`precision`), a hub model that cannot be had (`hub`), a run's checkpoints (`checkpoints`)
and LoRA adapters (`adapters`).
"""
