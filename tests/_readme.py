"""The shell commands of README.md's ```bash blocks: tests/test_readme.py runs them, or checks
that the test which owns a command runs it as written (readme_command)."""

from __future__ import annotations

import re

from tests._paths import ROOT


def readme_commands() -> list[str]:
    """Shell commands from the README's ```bash blocks, continuation lines joined, comments cut."""
    text = (ROOT / "README.md").read_text(encoding="utf-8")
    commands = []
    for block in re.findall(r"```bash\n(.*?)```", text, re.DOTALL):
        for command in block.replace("\\\n", " ").splitlines():
            command = re.sub(r"\s+#.*$", "", command).strip()
            if command:
                commands.append(" ".join(command.split()))
    return commands


def readme_command(prefix: str) -> str:
    """The one README command that starts with `prefix`, as written."""
    found = [command for command in readme_commands() if command.startswith(prefix)]
    assert len(found) == 1, f"README.md has {len(found)} commands starting {prefix!r}: {found}"
    return found[0]
