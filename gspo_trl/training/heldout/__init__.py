"""Held-out score during training: which engine generates, which rows each rank takes, the callback."""
