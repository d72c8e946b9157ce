"""A shared (module- or session-scoped) fixture that fails is reported in full once.

pytest computes such a fixture once and, when it raised, re-raises the same error for every
later test that uses it: one slow demo run that hit its limit printed the same long failure
(or pytest-timeout's "Timeout") 17 times, once per test of the README, demo and eval files,
and the tests looked like 17 separate timeouts. With this hook the first test that needed
the fixture shows the fixture's own error; each later one fails with a single line naming the
fixture and that first test. conftest.py imports the hook, which activates it suite-wide.
"""

from __future__ import annotations

from collections.abc import Generator
from typing import Any

import pytest


def _first_line(error: BaseException) -> str:
    text = str(error).strip()
    line = text.splitlines()[0] if text else ""
    return f"{type(error).__name__}: {line}"[:300]


def _test_id(request: pytest.FixtureRequest) -> str:
    """The test whose setup ran the fixture (a shared fixture's own node is its module or session)."""
    return getattr(request, "_pyfuncitem", request.node).nodeid


@pytest.hookimpl(wrapper=True)
def pytest_fixture_setup(
    fixturedef: pytest.FixtureDef, request: pytest.FixtureRequest
) -> Generator[None, Any, Any]:
    try:
        return (yield)
    except BaseException as error:
        cached = getattr(fixturedef, "cached_result", None)
        if fixturedef.scope != "function" and isinstance(cached, tuple) and len(cached) == 3 and cached[2]:
            # pytest keeps (value, cache key, (error, traceback)) and re-raises the error for
            # each later user (_pytest/fixtures.py, FixtureDef.execute): hand them a one-liner.
            later = pytest.fail.Exception(
                f"{fixturedef.scope}-scoped fixture {fixturedef.argname!r} failed in "
                f"{_test_id(request)} (its full error is reported there): {_first_line(error)}",
                pytrace=False,
            )
            fixturedef.cached_result = (cached[0], cached[1], (later, None))
        raise
