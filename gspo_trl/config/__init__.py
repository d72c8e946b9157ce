"""Recipes: GSPO's defaults, the typed sections, loading YAML with overrides, and validation."""
