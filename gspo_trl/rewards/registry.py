"""The reward registry: from a recipe's reward spec to a ready TRL reward callable.

A spec is one of

* a registered name (built-ins, ``@register`` decorations, entry points of the
  ``gspo_trl.rewards`` group): ``math``, ``cosine``;
* a dotted import path: ``my_pkg.rewards:my_fn``;
* a file path: ``path/to/file.py:my_fn``.

A registered reward is either a plain reward function (``fn(completions, **columns)``)
or a *factory* (``factory=True``) whose keyword arguments are the reward's parameters
and which returns the reward callable. Parameters of a plain function are its
keyword arguments with defaults; ``get`` binds them. Everything here is cheap: no
worker pool starts and no heavy library is imported until a reward is first called,
so the recipe validator can call :func:`describe` and :func:`validate_params` freely.
"""

from __future__ import annotations

import dataclasses
import difflib
import functools
import inspect
import logging
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from gspo_trl.core.errors import RewardParameterError, RewardRegistrationError, UnknownRewardError
from gspo_trl.core.suggest import did_you_mean
from gspo_trl.rewards.loading import entry_points, import_modules, load_object
from gspo_trl.rewards.params import REQUIRED, RewardParam, coerce_param, describe_type, parameter_types

log = logging.getLogger(__name__)

# Keyword arguments TRL passes to every reward function itself; they are not dataset columns.
TRL_PROVIDED = frozenset(
    {"prompts", "completions", "completion_ids", "trainer_state", "log_extra", "log_metric", "environments"}
)


@dataclass(frozen=True)
class RewardInfo:
    """What a recipe validator and ``gspo-trl rewards list`` need to know about a reward."""

    name: str
    summary: str
    parameters: tuple[RewardParam, ...]
    columns: tuple[str, ...]
    source: str
    is_async: bool = False
    aliases: tuple[str, ...] = ()


@dataclass(frozen=True)
class _Entry:
    name: str
    target: Callable[..., Any]
    factory: bool
    columns: tuple[str, ...]
    summary: str
    source: str
    aliases: tuple[str, ...] = ()
    # old parameter name -> (new name, conversion of the old value to the new one)
    renamed: tuple[tuple[str, tuple[str, Callable[[Any], Any]]], ...] = ()


_REGISTRY: dict[str, _Entry] = {}
_ALIASES: dict[str, str] = {}  # alias -> registered name
LABEL = "label"
"""A parameter every reward accepts: the metric name TRL logs for it (default: the reward's name)."""


def register(
    name: str,
    *,
    columns: tuple[str, ...] | None = None,
    factory: bool = False,
    summary: str | None = None,
    aliases: tuple[str, ...] = (),
    renamed: dict[str, tuple[str, Callable[[Any], Any]]] | None = None,
) -> Callable[[Callable[..., Any]], Callable[..., Any]]:
    """Register a reward function (or, with ``factory=True``, a reward factory) under ``name``.

    ``columns`` are the dataset columns the reward reads; for a plain function they default
    to its parameters without defaults that TRL does not provide itself. ``aliases`` are
    other names for it (the names other libraries use); ``renamed`` maps an old parameter
    name to its new name and a conversion of its value, so old recipes keep working. The
    decorated object is returned unchanged, so it can still be called or imported directly.

    Registering a taken name (or alias) with a different object raises
    :class:`RewardRegistrationError` naming both definitions; registering the same
    definition again (a module imported twice) is allowed.
    """

    def decorate(target: Callable[..., Any]) -> Callable[..., Any]:
        entry = _make_entry(name, target, factory, columns, summary, source=_source_of(target))
        entry = dataclasses.replace(entry, aliases=tuple(aliases), renamed=tuple((renamed or {}).items()))
        for taken in (name, *aliases):
            _refuse_clash(taken, target)
        _REGISTRY[name] = entry
        for alias in aliases:
            _ALIASES[alias] = name
        target.__gspo_reward__ = entry  # type: ignore[attr-defined]
        return target

    return decorate


def _refuse_clash(name: str, target: Callable[..., Any]) -> None:
    holder = _REGISTRY.get(_ALIASES.get(name, name))
    if holder is None or holder.target is target or _place(holder.target) == _place(target):
        return
    raise RewardRegistrationError(
        f"reward name {name!r} is already registered by {_place(holder.target)}; "
        f"{_place(target)} registers a different object under it. Pick another name."
    )


def _place(target: Any) -> str:
    """``module.qualname (file:line)`` of a definition, to name it in errors."""
    obj = inspect.unwrap(target)
    where = getattr(obj, "__qualname__", repr(obj))
    try:
        lines = inspect.getsourcelines(obj)[1]
        return f"{obj.__module__}.{where} ({inspect.getsourcefile(obj)}:{lines})"
    except (OSError, TypeError):
        return f"{getattr(obj, '__module__', '?')}.{where}"


def describe(spec: str) -> RewardInfo:
    """Name, parameters, needed dataset columns and summary of the reward ``spec`` names."""
    entry = _resolve(spec)
    return RewardInfo(
        name=entry.name,
        summary=entry.summary,
        parameters=_parameters(entry),
        columns=entry.columns,
        source=entry.source,
        is_async=not entry.factory and _is_async(entry.target),
        aliases=entry.aliases,
    )


def available(imports: list[str] | tuple[str, ...] = ()) -> list[RewardInfo]:
    """Every registered reward plus every ``gspo_trl.rewards`` entry point, sorted by name,
    after importing `imports` (a recipe's ``imports:`` modules, which register their own)."""
    import_modules(imports)
    names = set(_REGISTRY) | set(entry_points())
    infos = []
    for name in sorted(names):
        try:
            infos.append(describe(name))
        except UnknownRewardError as err:  # a broken third-party entry point must not hide the others
            infos.append(RewardInfo(name, f"(cannot load: {err})", (), (), "entry point"))
    return infos


def validate_params(spec: str, params: dict[str, Any]) -> dict[str, Any]:
    """``params`` checked against the reward's signature and converted to its declared types.

    Names, required ones, and each value read as its annotation by gspo_trl.core.coercion (text
    from a command line, ``"4096"``, becomes the int 4096; ``1.5`` for an int is refused).
    Returns the converted parameters (old names replaced by their new ones, ``label`` kept);
    raises :class:`RewardParameterError` naming the reward and the parameter. Runs nothing
    of the reward itself; value checks that need the reward's logic (e.g. a negative
    ``max_len``) happen in :func:`get`, which is equally cheap.
    """
    entry = _resolve(spec)
    params = _renamed_params(entry, params, warn=False)
    declared = {p.name: p for p in _parameters(entry)}
    converted = {}
    for key, value in params.items():
        if key == LABEL:
            if not isinstance(value, str) or not value.strip():
                raise RewardParameterError(
                    f"reward {entry.name!r}: {LABEL} must be a non-empty string, got {value!r}"
                )
            converted[key] = value
            continue
        if key not in declared:
            hint, close = ", ".join(declared) or "none", did_you_mean(key, declared)
            raise RewardParameterError(
                f"reward {entry.name!r} has no parameter {key!r}{close} (parameters: {hint})"
            )
        converted[key] = coerce_param(entry.name, declared[key], value)
    missing = [p.name for p in declared.values() if p.required and p.name not in params]
    if missing:
        raise RewardParameterError(f"reward {entry.name!r} needs parameter(s) {', '.join(missing)}")
    return converted


def get(spec: str, **params: Any) -> Callable[..., Any]:
    """The ready reward callable for ``spec`` with ``params`` bound.

    Its ``__name__``, the key TRL logs the reward's metrics under, is the reward's
    registered name (``math`` also when named by its alias ``accuracy``), or the
    ``label`` parameter when given, so that changing a parameter does not rename a metric.
    """
    entry = _resolve(spec)
    _renamed_params(entry, params)  # warns once per old parameter name
    params = validate_params(spec, params)
    name = params.pop(LABEL, None) or entry.name
    if entry.factory:
        try:
            reward = entry.target(**params)
        except (TypeError, ValueError) as err:
            if isinstance(err, RewardParameterError):
                raise
            raise RewardParameterError(f"reward {entry.name!r}: {err}") from err
        try:
            reward.__name__ = name
        except (AttributeError, TypeError):
            reward = _bind(reward, {}, name)
        return reward
    if not params and getattr(entry.target, "__name__", None) == name:
        return entry.target
    return _bind(entry.target, params, name)


def _renamed_params(entry: _Entry, params: dict[str, Any], warn: bool = True) -> dict[str, Any]:
    """``params`` with old parameter names replaced by their new ones (one warning each)."""
    out = dict(params)
    for old, (new, convert) in entry.renamed:
        if old in out:
            if new in out:
                raise RewardParameterError(
                    f"reward {entry.name!r}: give {new!r} only ({old!r} is its old name)"
                )
            if warn:
                log.warning(
                    "reward %r: parameter %r is now %r; please update the recipe", entry.name, old, new
                )

            out[new] = convert(out.pop(old))
    return out


def _bind(target: Callable[..., Any], params: dict[str, Any], name: str) -> Callable[..., Any]:
    cls = _AsyncBoundReward if _is_async(target) else _BoundReward
    return cls(target, params, name)


class _BoundReward:
    """A reward with fixed keyword parameters; a class (not a closure) so it pickles."""

    def __init__(self, target: Callable[..., Any], params: dict[str, Any], name: str) -> None:
        self.target, self.params, self.__name__ = target, params, name

    def __call__(self, completions: list[Any], **kwargs: Any) -> list[float | None]:
        return self.target(completions, **kwargs, **self.params)

    def __repr__(self) -> str:
        return f"<reward {self.__name__}>"


class _AsyncBoundReward(_BoundReward):
    """Async twin of :class:`_BoundReward`: TRL gathers async rewards concurrently."""

    async def __call__(self, completions: list[Any], **kwargs: Any) -> list[float | None]:  # type: ignore[override]
        return await self.target(completions, **kwargs, **self.params)


def _is_async(target: Any) -> bool:
    while isinstance(target, functools.partial | _BoundReward):
        target = target.func if isinstance(target, functools.partial) else target.target
    if inspect.iscoroutinefunction(target):
        return True
    dunder_call = type(target).__dict__.get("__call__") or getattr(type(target), "__call__", None)  # noqa: B004
    return not inspect.isfunction(target) and inspect.iscoroutinefunction(dunder_call)


def _signature(target: Callable[..., Any]) -> inspect.Signature:
    try:
        return inspect.signature(target)
    except (TypeError, ValueError):
        return inspect.Signature()


def _parameters(entry: _Entry) -> tuple[RewardParam, ...]:
    types = parameter_types(entry.target)
    out = []
    for p in _signature(entry.target).parameters.values():
        if p.kind in (p.VAR_KEYWORD, p.VAR_POSITIONAL) or p.name in TRL_PROVIDED:
            continue
        if not entry.factory and p.default is p.empty:
            continue  # a column, not a parameter
        default = REQUIRED if p.default is p.empty else p.default
        declared = types.get(p.name, Any)
        out.append(RewardParam(p.name, default, describe_type(declared), declared))
    return tuple(out)


def _inferred_columns(target: Callable[..., Any]) -> tuple[str, ...]:
    params = _signature(target).parameters.values()
    return tuple(
        p.name
        for p in params
        if p.default is p.empty
        and p.kind in (p.POSITIONAL_OR_KEYWORD, p.KEYWORD_ONLY)
        and p.name not in TRL_PROVIDED
    )


def columns_read(func: Any) -> tuple[str, ...]:
    """The dataset columns a reward callable needs: TRL passes each column as a keyword
    (trl/trainer/grpo_trainer.py:1584-1585), so a parameter without a default that TRL does not
    provide itself must be a column. A registered reward's declared columns; a bound one's
    less its bound parameters; () for what has no inspectable signature (a reward model)."""
    entry = getattr(func, "__gspo_reward__", None)
    if isinstance(entry, _Entry):
        return entry.columns
    if isinstance(func, _BoundReward):
        return tuple(c for c in columns_read(func.target) if c not in func.params)
    try:
        return _inferred_columns(func)
    except (TypeError, ValueError):
        return ()


def _make_entry(
    name: str,
    target: Callable[..., Any],
    factory: bool,
    columns: tuple[str, ...] | None,
    summary: str | None,
    source: str,
) -> _Entry:
    if not callable(target):
        raise UnknownRewardError(f"reward {name!r} resolves to {target!r}, which is not callable")
    if columns is None:
        columns = () if factory else _inferred_columns(target)
    doc = inspect.getdoc(target) or ""
    first_line = summary or (doc.strip().splitlines()[0] if doc.strip() else "(no docstring)")
    return _Entry(name, target, factory, tuple(columns), first_line, source)


def _source_of(target: Callable[..., Any]) -> str:
    module = getattr(target, "__module__", "") or ""
    return "built-in" if module.startswith(__package__ + ".") else module


def _entry_from_object(name: str, obj: Any, source: str) -> _Entry:
    entry = getattr(obj, "__gspo_reward__", None)
    if isinstance(entry, _Entry):
        return entry
    return _make_entry(name, obj, False, None, None, source)


def _resolve(spec: str) -> _Entry:
    if not isinstance(spec, str) or not spec:
        raise UnknownRewardError(f"reward spec must be a non-empty string, got {spec!r}")
    if spec in _REGISTRY:
        return _REGISTRY[spec]
    if spec in _ALIASES:
        return _REGISTRY[_ALIASES[spec]]
    if ":" in spec:
        attr, obj = load_object(spec)
        return _entry_from_object(attr, obj, spec)
    eps = entry_points()
    if spec in eps:
        try:
            obj = eps[spec].load()
        except Exception as err:
            raise UnknownRewardError(
                f"entry point {spec!r} ({eps[spec].value}) failed to load: {err}"
            ) from err
        return _entry_from_object(spec, obj, f"entry point {eps[spec].value}")
    candidates = sorted(set(_REGISTRY) | set(_ALIASES) | set(eps))
    close = difflib.get_close_matches(spec, candidates, n=3, cutoff=0.5)
    hint = f"did you mean {', '.join(close)}? " if close else ""
    raise UnknownRewardError(
        f"unknown reward {spec!r}: {hint}known rewards: {', '.join(candidates)}; "
        "or give a path 'pkg.module:function' or 'path/to/file.py:function'"
    )
