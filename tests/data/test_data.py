"""Data loading: local formats, column mapping, system prompt, splits, and bad rows by index."""

from __future__ import annotations

import json
from pathlib import Path

import pandas as pd
import pytest

from gspo_trl.config.sections import DataConfig
from gspo_trl.core.errors import DataError
from gspo_trl.data.loading import load_data

ROWS = [{"question": f"what is {i} + {i}?", "answer": str(2 * i)} for i in range(10)]


def write_rows(tmp_path: Path, suffix: str, rows: list[dict] = ROWS) -> Path:
    path = tmp_path / f"data{suffix}"
    frame = pd.DataFrame(rows)
    if suffix == ".jsonl":
        path.write_text("".join(json.dumps(r) + "\n" for r in rows), encoding="utf-8")
    elif suffix == ".json":
        path.write_text(json.dumps(rows), encoding="utf-8")
    elif suffix == ".csv":
        frame.to_csv(path, index=False)
    elif suffix == ".parquet":
        frame.to_parquet(path)
    return path


@pytest.mark.parametrize("suffix", [".jsonl", ".json", ".csv", ".parquet"])
def test_local_formats_map_columns_and_become_conversations(tmp_path: Path, suffix: str) -> None:
    config = DataConfig(
        path=str(write_rows(tmp_path, suffix)),
        prompt_column="question",
        solution_column="answer",
        system_prompt="Think, then answer.",
    )
    train, evaluation = load_data(config)
    assert evaluation is None
    assert len(train) == len(ROWS)  # nothing dropped
    assert {"prompt", "solution"} <= set(train.column_names)
    assert train[3]["prompt"] == [
        {"role": "system", "content": "Think, then answer."},
        {"role": "user", "content": "what is 3 + 3?"},
    ]
    assert str(train[3]["solution"]) == "6"


def test_eval_size_holds_out_rows_without_losing_any(tmp_path: Path) -> None:
    config = DataConfig(path=str(write_rows(tmp_path, ".jsonl")), prompt_column="question", eval_size=3)
    train, evaluation = load_data(config)
    assert (len(train), len(evaluation)) == (7, 3)
    prompts = {row["prompt"][-1]["content"] for row in train} | {
        row["prompt"][-1]["content"] for row in evaluation
    }
    assert prompts == {row["question"] for row in ROWS}


def test_loading_does_not_repeat_the_banners_data_line(caplog: pytest.LogCaptureFixture) -> None:
    """The training banner says "N training rows, M held-out"; the loader's INFO line said it again."""
    import logging

    with caplog.at_level(logging.INFO):
        train, evaluation = load_data(DataConfig(path="synthetic:reversal", num_rows=20, eval_size=4))
    assert (len(train), len(evaluation)) == (16, 4)
    assert not [r for r in caplog.records if r.name.startswith("gspo_trl.data")], caplog.text


def test_conversational_prompts_keep_their_messages(tmp_path: Path) -> None:
    rows = [{"prompt": [{"role": "user", "content": "hi"}], "solution": "1"}]
    train, _ = load_data(DataConfig(path=str(write_rows(tmp_path, ".jsonl", rows)), system_prompt="S"))
    assert train[0]["prompt"] == [{"role": "system", "content": "S"}, {"role": "user", "content": "hi"}]


def test_synthetic_source_is_deterministic() -> None:
    first, _ = load_data(DataConfig(path="synthetic:reversal", num_rows=20, seed=3))
    second, _ = load_data(DataConfig(path="synthetic:reversal", num_rows=20, seed=3))
    assert first["solution"] == second["solution"]


BAD_DATA = [
    # (rows, config overrides, message fragment)
    ([{"question": "ok", "answer": "1"}, {"question": "", "answer": "2"}], {}, "row 1: prompt is empty"),
    ([{"question": "ok", "answer": "1"}, {"question": None, "answer": "2"}], {}, "row 1"),
    ([{"question": "ok", "answer": "1"}], {"prompt_column": "problem"}, "'problem'"),
    ([{"question": "ok", "answer": "1"}], {"solution_column": "gold"}, "'gold'"),
]


@pytest.mark.parametrize(("rows", "overrides", "message"), BAD_DATA)
def test_bad_rows_and_columns_are_named(
    tmp_path: Path, rows: list[dict], overrides: dict, message: str
) -> None:
    config = DataConfig(
        path=str(write_rows(tmp_path, ".jsonl", rows)),
        **{"prompt_column": "question", "solution_column": "answer", **overrides},
    )
    with pytest.raises(DataError) as caught:
        load_data(config)
    assert message in str(caught.value)


def test_many_bad_rows_are_counted_not_dropped(tmp_path: Path) -> None:
    rows = [{"question": "" if i % 2 else "ok"} for i in range(20)]
    with pytest.raises(DataError, match=r"row 1: .*and 5 more"):
        load_data(DataConfig(path=str(write_rows(tmp_path, ".jsonl", rows)), prompt_column="question"))


@pytest.mark.parametrize(
    ("path", "message"),
    [
        ("missing.jsonl", "does not exist"),
        ("./no/such/dir", "does not exist"),
        ("synthetic:sorting", "unknown synthetic task"),
    ],
)
def test_bad_paths_are_named(path: str, message: str) -> None:
    with pytest.raises(DataError, match=message):
        load_data(DataConfig(path=path))


def test_a_fifo_is_named_as_not_a_regular_file_without_being_opened(tmp_path: Path) -> None:
    """Issue 43: main said a FIFO "does not exist". Nothing writes to this one, so opening it for
    reading would block: the timeout turns such a hang into a failure."""
    import os
    import signal

    fifo = tmp_path / "rows.jsonl"
    os.mkfifo(fifo)
    signal.signal(signal.SIGALRM, lambda *_: pytest.fail("data.path: the FIFO was opened and blocked"))
    signal.alarm(10)
    try:
        with pytest.raises(DataError, match=r"rows\.jsonl is not a regular file or a directory \(a FIFO"):
            load_data(DataConfig(path=str(fifo)))
    finally:
        signal.alarm(0)


def test_unsupported_file_type(tmp_path: Path) -> None:
    path = tmp_path / "data.txt"
    path.write_text("hello\n")
    with pytest.raises(DataError, match=r"data\.txt"):
        load_data(DataConfig(path=str(path)))


def test_empty_dataset(tmp_path: Path) -> None:
    path = tmp_path / "empty.csv"
    path.write_text("prompt,solution\n")
    with pytest.raises(DataError, match="empty"):
        load_data(DataConfig(path=str(path)))


def test_one_row_after_blank_lines_is_loaded_not_called_empty(tmp_path: Path) -> None:
    """Issue 43: the empty-file check read 4 KiB, so 5,000 blank lines before the only row said
    "is empty (no rows)"; the row is loaded (datasets skips blank lines), and a file of blank
    lines alone is still refused as empty."""
    path = tmp_path / "late.jsonl"
    path.write_text("\n" * 5000 + json.dumps({"prompt": "say 1", "solution": "1"}) + "\n\n")
    train, _ = load_data(DataConfig(path=str(path)))
    assert train["solution"] == ["1"]
    path.write_text("\n" * 5000)
    with pytest.raises(DataError, match=r"late\.jsonl is empty \(no rows\)"):
        load_data(DataConfig(path=str(path)))


def test_hub_dataset_offline_is_a_clear_error_not_a_hang(monkeypatch: pytest.MonkeyPatch) -> None:
    """Offline as `HF_HUB_OFFLINE=1 gspo-trl ...` is: huggingface_hub and datasets read that
    switch once, when imported (huggingface_hub/constants.py, datasets/config.py), so the
    environment alone came too late here and the lookup went to the network (23 s on a machine
    without one before failing, instead of at once)."""
    import datasets
    import huggingface_hub

    monkeypatch.setenv("HF_HUB_OFFLINE", "1")
    monkeypatch.setenv("HF_DATASETS_OFFLINE", "1")
    monkeypatch.setattr(huggingface_hub.constants, "HF_HUB_OFFLINE", True)
    monkeypatch.setattr(datasets.config, "HF_HUB_OFFLINE", True)
    with pytest.raises(DataError, match="open-r1/no-such-dataset-here"):
        load_data(DataConfig(path="open-r1/no-such-dataset-here"))
