"""The shipped accelerate configs set only keys that `accelerate launch` reads from a file.

accelerate copies a top-level config key into the launch arguments only while that argument is
still None; arguments with another command-line default (`rdzv_backend: static`,
`same_network: False`, ...) silently win over the file. A config that sets such a key promises
something the launch does not do, so none may. Checked with accelerate's own parser.
"""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml
from accelerate.commands.launch import launch_command_parser

from tests._paths import ROOT

CONFIGS = sorted((ROOT / "gspo_trl" / "configs").glob("*.yaml"))
HANDLED_APART = {"compute_environment", "mixed_precision", "distributed_type", "debug"}
"""Keys accelerate's launch applies from the file by their own rules (not the None test)."""


def ignored_keys(config: dict) -> list[str]:
    defaults = {action.dest: action.default for action in launch_command_parser()._actions}
    return sorted(
        key
        for key, value in config.items()
        if not isinstance(value, dict)
        and key not in HANDLED_APART
        and key in defaults
        and defaults[key] is not None
    )


def test_the_check_finds_an_ignored_key() -> None:
    assert ignored_keys({"rdzv_backend": "c10d", "num_machines": 2}) == ["rdzv_backend"]


@pytest.mark.parametrize("path", CONFIGS, ids=[p.name for p in CONFIGS])
def test_no_config_sets_a_key_the_launch_ignores(path: Path) -> None:
    assert ignored_keys(yaml.safe_load(path.read_text())) == []
