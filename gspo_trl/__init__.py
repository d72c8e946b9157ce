"""gspo-trl: GSPO training recipes on top of Hugging Face TRL."""

__version__ = "0.1.0"
