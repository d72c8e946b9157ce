"""The files under scripts/ as modules, for the tests that exercise them (scripts/ is no package)."""

from __future__ import annotations

import importlib.util
import sys
from types import ModuleType

from tests._paths import ROOT


def load_script(name: str) -> ModuleType:
    """scripts/`name`.py, executed afresh and registered in sys.modules under `name`: dataclasses
    and pickle look a class's module up there, and a script's own imports of its neighbours
    (which put scripts/ on sys.path) then find the same module."""
    spec = importlib.util.spec_from_file_location(name, ROOT / "scripts" / f"{name}.py")
    module = importlib.util.module_from_spec(spec)
    sys.modules[name] = module
    spec.loader.exec_module(module)
    return module
