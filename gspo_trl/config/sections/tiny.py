"""The tiny CPU model's name in a recipe, and where a run builds it."""

TINY = "tiny"
"""`model.name_or_path: tiny` builds the tiny CPU model (gspo_trl.model.tiny.dense) under the output dir."""
TINY_MODEL_DIR = "tiny-model"
"""Where a run asking for `tiny` builds it: OUTPUT_DIR/tiny-model (gspo_trl.model.loading.settings)."""
TINY_MAX_POSITIONS = 512
"""The tiny model's max_position_embeddings (gspo_trl.model.tiny.dense.TinyModelSpec reads it):
preflight checks max_completion_length against it before the model is first built."""
