"""A function written out twice in the package is one fact with two homes: the copies drift (the
issue's `_any_rank`, the same ten lines in the interrupt handler and the NaN stop). Read with
`ast`; docstrings and names aside, any two function bodies of three or more statements that are
the same code fail here, naming both."""

from __future__ import annotations

import ast
from collections import defaultdict

from tests._paths import ROOT

SMALLEST_BODY = 3
"""Statements below which a repeated body is an idiom (a property, a delegation), not a copy."""


def repeated_functions() -> list[list[str]]:
    bodies: dict[str, list[str]] = defaultdict(list)
    for path in sorted((ROOT / "gspo_trl").rglob("*.py")):
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if not isinstance(node, ast.FunctionDef | ast.AsyncFunctionDef):
                continue
            body = node.body
            if isinstance(body[0], ast.Expr) and isinstance(body[0].value, ast.Constant):
                body = body[1:]  # the docstring
            if len(body) >= SMALLEST_BODY:
                code = ast.dump(node.args) + "".join(ast.dump(statement) for statement in body)
                bodies[code].append(f"{path.relative_to(ROOT)}:{node.lineno} {node.name}")
    return [places for places in bodies.values() if len(places) > 1]


def test_no_function_is_written_twice() -> None:
    assert repeated_functions() == []
