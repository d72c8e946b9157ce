"""Every error a user can cause, in one module, so the CLI reports them all the same way.

Each is a `UserError`: the message names the input at fault (file, key, column, row, reward)
and the fix, and the `gspo-trl` command prints it on one line and exits with status 2,
without a traceback. Anything else is a bug and keeps its traceback. This module imports
nothing heavy, so every layer of the package can raise these.
"""

from __future__ import annotations

from gspo_trl.rewards.errors import RewardParameterError, UnknownRewardError


class UserError(ValueError):
    """Input the user must fix; the message says what and where."""


class RecipeError(UserError):
    """A recipe key or value that cannot work; the message names the file, the key and the fix."""


class FieldTypeError(RecipeError):
    """A value that cannot be read as its field's declared type."""


class DataError(UserError):
    """Data that cannot be trained on; the message names the source, column or row."""


class ModelConfigError(UserError):
    """A `model:` section that cannot work; the message names the key."""


class ModelNotFoundError(UserError):
    """A model or run argument that names nothing loadable; the message names it."""


class EvalError(UserError):
    """Evaluation or filtering options that cannot work together; the message names the option."""


USER_ERRORS: tuple[type[Exception], ...] = (UserError, UnknownRewardError, RewardParameterError)
"""What the CLI reports in one line (exit 2); the reward library's own errors included."""


class FilterError(EvalError):
    """`gspo-trl filter` options or results that cannot work (e.g. no row kept)."""
