"""A shared fixture that fails (or runs into pytest-timeout) is reported in full once: the later
tests that need it fail with one line naming it and the first test (tests/_shared_fixtures.py)."""

from __future__ import annotations

import os

import pytest

from tests._paths import ROOT

pytest_plugins = ["pytester"]

TESTS = """
import time

import pytest


@pytest.fixture(scope="session")
def demo():
    {body}


def test_one(demo):
    pass


def test_two(demo):
    pass


def test_three(demo):
    pass
"""


@pytest.mark.parametrize(
    ("body", "error"),
    [
        ('raise ValueError("the demo exited 1\\nTraceback and its tail")', "ValueError: the demo exited 1"),
        ("time.sleep(30)", "Failed: Timeout"),  # pytest-timeout, inside the first test's setup
    ],
    ids=["raises", "pytest-timeout"],
)
def test_a_failed_shared_fixture_is_reported_in_full_once(
    pytester: pytest.Pytester, monkeypatch: pytest.MonkeyPatch, body: str, error: str
) -> None:
    monkeypatch.setenv("PYTHONPATH", os.pathsep.join(filter(None, [str(ROOT), os.environ.get("PYTHONPATH")])))
    pytester.makeconftest("from tests._shared_fixtures import pytest_fixture_setup  # noqa: F401\n")
    pytester.makepyfile(test_shared=TESTS.format(body=body))
    result = pytester.runpytest_subprocess("-p", "no:cacheprovider", "--timeout", "2")
    result.assert_outcomes(errors=3)
    text = result.stdout.str()
    assert f"ERROR test_shared.py::test_one - {error}" in text, text  # the first test: the fixture's error
    once = "session-scoped fixture 'demo' failed in test_shared.py::test_one (its full error is reported"
    # Counted above the short summary, whose lines pytest cuts to the terminal's width except
    # when CI is set: there each error's message shows a second time.
    reports = text.split("short test summary info")[0]
    assert reports.count(once) == 2, text
    assert reports.count("def demo():") == 1, text  # one traceback, not three
