"""A recipe's `probes:` key: probe classes named as rewards are (`module:Class` or
`file.py:Class`), so `gspo-trl train` runs the probes a script would pass as
`GSPOTrainer(..., probes=[...])` (docs/probes.md).

Each entry must name a subclass of gspo_trl.training.probes.base.Probe that builds without
arguments; `validate` and `train` check that before any model loads, naming the entry.
"""

from __future__ import annotations

from typing import Any

from gspo_trl.core.errors import RecipeError, UnknownRewardError
from gspo_trl.rewards.loading import load_object
from gspo_trl.training.probes.base import Probe


def load_probe_class(spec: str, index: int) -> type[Probe]:
    """The Probe subclass `spec` names; a RecipeError naming `probes[index]` otherwise."""
    where = f"probes[{index}] ({spec!r})"
    try:
        _, found = load_object(spec)
    except UnknownRewardError as error:  # the reward loader's words: file, module, attribute
        raise RecipeError(f"{where}: {str(error).replace('reward ', '', 1)}") from None
    if not (isinstance(found, type) and issubclass(found, Probe)):
        raise RecipeError(
            f"{where} is {found!r}, not a Probe subclass: write `class X(Probe)` "
            "(from gspo_trl.training.probes.base import Probe; docs/probes.md)"
        )
    return found


def recipe_probes(specs: list[str]) -> list[Any]:
    """One instance of each named probe, in the recipe's order."""
    probes = []
    for index, spec in enumerate(specs):
        cls = load_probe_class(spec, index)
        try:
            probes.append(cls())
        except TypeError as error:
            raise RecipeError(
                f"probes[{index}] ({spec!r}) cannot be built without arguments: {error}"
            ) from None
    return probes
