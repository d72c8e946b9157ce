"""A benchmark grid's finished runs, one JSON line each, so that an interrupted grid reruns only
what is missing (bench_mismatch.py, bench_staleness.py)."""

from __future__ import annotations

import json
from collections.abc import Callable
from pathlib import Path


class RunLog:
    """OUTPUT_DIR/runs.jsonl: `run(key, make)` returns the finished row whose fields include `key`,
    or calls `make()`, appends its row (with `key`) and returns it."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.finished = [json.loads(line) for line in path.read_text().splitlines()] if path.exists() else []

    def run(self, key: dict, make: Callable[[], dict]) -> dict:
        row = next((r for r in self.finished if key.items() <= r.items()), None)
        if row is None:
            row = make() | key
            self.path.parent.mkdir(parents=True, exist_ok=True)
            with self.path.open("a") as sink:
                sink.write(json.dumps(row) + "\n")
        return row
