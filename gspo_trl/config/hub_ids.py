"""Is a recipe's or command's `name_or_path` a local path or a Hugging Face Hub id?

One rule for models, runs and datasets, so a missing local directory is reported as missing
("does not exist") instead of being tried as a Hub id (an offline or 404 error naming no path).
"""

from __future__ import annotations


def looks_like_local_path(name: str) -> bool:
    """True when `name` cannot be a Hub id, so it can only mean a local path.

    The Hub's own rule decides: huggingface_hub's `validate_repo_id` (utils/_validators.py)
    refuses more than one '/', a leading or trailing '-' or '.', '--', '..' and any character
    outside [A-Za-z0-9_.-], so `./model`, `../runs/x`, `/abs`, `~/m` and `runs/qwen/checkpoint-8`
    are paths. `org/model` could be either; it is not called local (callers try the directory
    first, then the Hub).
    """
    from huggingface_hub.utils import HFValidationError, validate_repo_id

    try:
        validate_repo_id(name)
    except HFValidationError:
        return True
    return not name
