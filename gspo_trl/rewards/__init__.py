"""The verifier library: reward functions in TRL's calling convention, and their registry.

    import gspo_trl.rewards as rewards
    fn = rewards.get("cosine", max_len=1024)       # or "my_pkg.mod:fn", "path/file.py:fn"
    fn(completions, solution=[...])                # -> list[float | None]

Importing this package registers the built-ins (``math``, ``code``, ``format``,
``tag_count``, ``think_format``, ``cosine``, ``repetition``, ``soft_overlong``, and
the aliases ``accuracy``, ``repetition_penalty``, ``soft_overlong_punishment``) and nothing heavy: worker
pools and sandboxes start on a reward's first call.
"""

if __name__ != "gspo_trl.rewards":  # a checkout's top-level rewards/ is a link to this folder
    raise ImportError(
        f"the verifier library is imported as gspo_trl.rewards, not {__name__!r} (rewards/ in a "
        "checkout is its source folder): write `from gspo_trl import rewards`"
    )

from gspo_trl.core.errors import RewardParameterError, RewardRegistrationError, UnknownRewardError
from gspo_trl.rewards import code, cosine, math_verify_reward, shaping  # noqa: F401  (registers the built-ins)
from gspo_trl.rewards.registry import (
    RewardInfo,
    RewardParam,
    available,
    describe,
    get,
    register,
    validate_params,
)

__all__ = [
    "RewardInfo",
    "RewardParam",
    "RewardParameterError",
    "RewardRegistrationError",
    "UnknownRewardError",
    "available",
    "describe",
    "get",
    "register",
    "validate_params",
]
