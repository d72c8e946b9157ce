"""Evaluation: sampling completions, pass@k, grading, and pass-rate filtering of prompts."""
