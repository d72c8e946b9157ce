"""Prompts and gold answers: sources, dataset presets, column mapping and row checks."""
