"""Every problem in a recipe, found in one pass, as a compiler reports them.

Loading (gspo_trl.config.recipe) and validation (gspo_trl.config.validation) record each
problem here instead of stopping at the first, and raise them together at the end: one
problem as itself (its own type and message, as before), several as one `RecipeProblems`
whose lines each name the file and the key. A key whose value could not be read keeps its
default and is marked unreadable (a section's key by its full name, `data.num_rows`); checks
that read it are skipped, so a typo does not cascade into follow-on errors about a value the
user never wrote.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from gspo_trl.core.errors import USER_ERRORS, RecipeProblems


def problem_line(source: str, error: BaseException) -> str:
    """`recipe.yaml: key: what is wrong and the fix`, on one line."""
    message = " ".join(str(error).split())
    return f"{source}: {message.removeprefix(f'recipe {source}: ')}"


class Problems:
    """The problems found so far in the recipe read from `source`, and the keys they make unreadable."""

    def __init__(
        self, source: str, found: Iterable[BaseException] = (), unreadable: Iterable[str] = ()
    ) -> None:
        self.source = source
        self.errors: list[BaseException] = list(found)
        self.unreadable: set[str] = set(unreadable)

    def add(self, error: BaseException, key: str | None = None) -> None:
        """Record `error`; `key` (when given) could not be read, so checks reading it are skipped."""
        self.errors.append(error)
        if key is not None:
            self.unreadable.add(key)

    def cannot_read(self, keys: Iterable[str]) -> bool:
        """Whether a key of `keys` could not be read: the key itself, its section (`launch` for
        `launch.nodes`) or, for a section, any key in it (`launch.nodes` for `launch`)."""
        return any(
            bad == key or key.startswith(f"{bad}.") or bad.startswith(f"{key}.")
            for key in keys
            for bad in self.unreadable
        )

    def run(
        self, check: Callable[..., Any], *args: Any, reads: Iterable[str] = (), marks: Iterable[str] = ()
    ) -> Any:
        """`check(*args)`'s result, or None when it refused (recorded) or reads an unreadable key;
        a refusal marks the keys `marks` unreadable, so later checks reading them are skipped."""
        if self.cannot_read(reads):
            return None
        try:
            return check(*args)
        except USER_ERRORS as error:
            self.add(error)
            self.unreadable.update(marks)
            return None

    def raise_if_any(self) -> None:
        """Raise what was found: one problem as itself, several as one RecipeProblems."""
        if len(self.errors) == 1:
            raise self.errors[0]
        if self.errors:
            raise RecipeProblems([problem_line(self.source, error) for error in self.errors])
