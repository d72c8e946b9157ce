"""Finding user rewards: import paths, file paths and the ``gspo_trl.rewards`` entry points."""

from __future__ import annotations

import difflib
import importlib
import importlib.metadata
import importlib.util
import os
import re
import sys
from pathlib import Path
from typing import Any

from gspo_trl.core.errors import UnknownRewardError

ENTRY_POINT_GROUP = "gspo_trl.rewards"
_FILE_MODULES: dict[Path, Any] = {}  # a file is imported once per process, like a module


def load_object(spec: str) -> tuple[str, Any]:
    """The object a ``module:attr`` or ``file.py:attr`` spec names, with its attribute name."""
    where, _, attr = spec.rpartition(":")
    if not where or not attr:
        raise UnknownRewardError(
            f"reward spec {spec!r} must look like 'pkg.module:function' or 'file.py:function'"
        )
    if where.endswith(".py") or "/" in where or os.sep in where:
        module = _load_file(spec, Path(where))
    else:
        try:
            module = importlib.import_module(where)
        except ImportError as err:
            raise UnknownRewardError(f"reward {spec!r}: cannot import module {where!r}: {err}") from err
    if not hasattr(module, attr):
        names = [n for n in dir(module) if not n.startswith("_") and callable(getattr(module, n))]
        close = difflib.get_close_matches(attr, names, n=3, cutoff=0.5)
        hint = f" (did you mean {', '.join(close)}?)" if close else ""
        raise UnknownRewardError(f"reward {spec!r}: {where!r} has no attribute {attr!r}{hint}")
    return attr, getattr(module, attr)


def _load_file(spec: str, path: Path) -> Any:
    path = path.expanduser().resolve()
    if path in _FILE_MODULES:
        return _FILE_MODULES[path]
    if not path.is_file():
        raise UnknownRewardError(f"reward {spec!r}: file {str(path)!r} does not exist")
    module_name = f"gspo_trl_user_rewards.{path.stem}_{abs(hash(str(path))):x}"
    module_spec = importlib.util.spec_from_file_location(module_name, path)
    if module_spec is None or module_spec.loader is None:
        raise UnknownRewardError(f"reward {spec!r}: cannot load {str(path)!r} as a Python module")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[module_name] = module  # lets pickle find the functions again in this process
    try:
        module_spec.loader.exec_module(module)
    except Exception as err:
        del sys.modules[module_name]
        raise UnknownRewardError(f"reward {spec!r}: importing {str(path)!r} failed: {err!r}") from err
    _FILE_MODULES[path] = module
    return module


def import_modules(modules: list[str] | tuple[str, ...]) -> None:
    """Import the modules (``pkg.mod``) or files (``path/file.py``) a recipe's ``imports:`` lists.

    Importing registers the rewards they define with ``@rewards.register``, so the recipe can
    then name them. The working directory goes on ``sys.path`` first (as for ``python -m``),
    so a ``myrewards/`` package next to the recipe's launch directory imports without an install.
    """
    cwd = os.getcwd()
    if cwd not in sys.path:
        sys.path.insert(0, cwd)
    for name in modules:
        if name.endswith(".py") or "/" in name or os.sep in name:
            _load_file(f"imports: {name}", Path(name))
            continue
        try:
            importlib.import_module(name)
        except ImportError as err:
            raise UnknownRewardError(
                f"imports: cannot import {name!r} ({err}); it must be importable from {cwd} "
                "or installed (`pip install -e .` for your own package)"
            ) from err


def entry_points() -> dict[str, importlib.metadata.EntryPoint]:
    """Installed rewards of the ``gspo_trl.rewards`` entry-point group, by name."""
    return {ep.name: ep for ep in importlib.metadata.entry_points(group=ENTRY_POINT_GROUP)}


MAX_SCANNED_BYTES = 1 << 20
"""A module larger than this is not read for `modules_registering` (a reward module is a page)."""


def modules_registering(name: str, directory: str | Path = ".") -> list[str]:
    """The modules (`*.py` directly in `directory`) whose text registers reward `name`.

    Read as text, never imported (importing runs the user's code, and a module that is not
    listed in `imports:` should not register anything): a `register("name"` call, so an
    unknown reward can be answered with the `imports:` line the recipe probably lacks.
    """
    call = re.compile(r"register\(\s*(?:name\s*=\s*)?[\"']" + re.escape(name) + r"[\"']")
    found = []
    for path in sorted(Path(directory).glob("*.py")):
        try:
            if path.stat().st_size <= MAX_SCANNED_BYTES and call.search(path.read_text(errors="replace")):
                found.append(path.stem)
        except OSError:
            continue  # unreadable: no hint from it, and the unknown-reward error stands alone
    return found
