"""Every error a user can cause, in one module, so the CLI reports them all the same way.

Each is a `UserError`: the message names the input at fault (file, key, column, row, reward)
and the fix, and the `gspo-trl` command prints it on one line and exits with status 2,
without a traceback. Anything else is a bug and keeps its traceback. This module imports
nothing heavy, so every layer of the package can raise these.
"""

from __future__ import annotations

# The reward library's errors: ValueErrors (a reward's caller may catch ValueError), not
# UserErrors; the CLI reports them in one line too (USER_ERRORS).


class UnknownRewardError(ValueError):
    """A reward name or path that resolves to nothing; the message names it and the closest candidates."""


class RewardParameterError(ValueError):
    """A parameter a reward does not take, lacks, or cannot accept; the message names both."""


class RewardRegistrationError(ValueError):
    """Two different definitions registered under one reward name; the message names both."""


class ValueTypeError(ValueError):
    """A value that cannot be read as the type declared for it (a recipe field, a reward
    parameter, an override); the message names the key. See gspo_trl.core.coercion."""


class UserError(ValueError):
    """Input the user must fix; the message says what and where."""


class RecipeError(UserError):
    """A recipe key or value that cannot work; the message names the file, the key and the fix."""


class RecipeProblems(RecipeError):
    """Several problems one pass over a recipe found (gspo_trl.config.problems): `lines` holds one
    line per problem, each naming the file and the key, and the CLI prints them all, as a
    compiler does, so a recipe with three mistakes takes one run to fix, not three."""

    def __init__(self, lines: list[str]) -> None:
        super().__init__("\n".join(lines))
        self.lines = list(lines)


class FieldTypeError(RecipeError, ValueTypeError):
    """A value that cannot be read as its field's declared type (gspo_trl.core.coercion's error, as a
    recipe error)."""


class DataError(UserError):
    """Data that cannot be trained on; the message names the source, column or row."""


class ModelConfigError(UserError):
    """A `model:` section that cannot work; the message names the key."""


class VLLMServerLost(UserError):
    """A server-mode run's vLLM server stopped answering mid-run; the message names its URL and
    the checkpoint kept to resume from once it is back."""


class ModelNotFoundError(UserError):
    """A model or run argument that names nothing loadable; the message names it."""


class EvalError(UserError):
    """Evaluation or filtering options that cannot work together; the message names the option."""


class PlanError(UserError):
    """A plan input that cannot work; the message names the input and what to do."""


class RewardFailedError(UserError):
    """A reward function raised or returned something that is not one score per completion."""


class NonFiniteTrainingError(UserError):
    """Training produced inf/NaN weights, loss or grad norm; the message names the step and the
    checkpoint kept."""


class CheckpointWriteError(UserError):
    """A checkpoint could not be written (full disk); the message says how to continue."""


REWARD_ERRORS: tuple[type[Exception], ...] = (
    UnknownRewardError,
    RewardParameterError,
    RewardRegistrationError,
    ValueTypeError,
)
"""The reward library's errors: ValueErrors, not UserErrors, that the CLI reports too."""

USER_ERRORS: tuple[type[Exception], ...] = (UserError, *REWARD_ERRORS)
"""What the CLI reports in one line (exit 2); the reward library's own errors included."""


class FilterError(EvalError):
    """`gspo-trl filter` options or results that cannot work (e.g. no row kept)."""


class RunDirError(UserError):
    """An output_dir a run cannot use as asked: held by another run, holding a finished run
    (without --resume or --overwrite), or holding a different run than the one resumed."""
