"""`gspo-trl filter`: pass rates agree with an independent recount, the kept rows are exactly
those in range, resuming reproduces an uninterrupted run, and bad input is a named error."""

from __future__ import annotations

import json
import os
import re
from pathlib import Path
from typing import Any

import pytest
from datasets import Dataset

from gspo_trl.cli.filter import parse_args
from gspo_trl.cli.main import main as gspo_trl_main
from gspo_trl.data.synthetic import digit_reversal_reward, make_rl_rows
from gspo_trl.eval.filter import write_rows
from tests._gspo_helpers import tiny_model_dir

os.environ["HF_HUB_OFFLINE"] = "1"
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")

ODD_LENGTH = '''
def odd_length(completions, **_):
    """1.0 for odd-length text: on an untrained model's output, about half the samples pass."""
    return [float(len(c) % 2) for c in completions]
'''
REVERSAL = "gspo_trl.data.synthetic:digit_reversal_reward"
ROWS, G, CHUNK = 16, 4, 4
LOW, HIGH, THRESHOLD = 0.5, 0.75, 0.5  # P(a row in range) = 10/16: some kept, some dropped


def _recipe(root: Path, model: str, data: str = "synthetic:reversal", extra: str = "") -> Path:
    """Two rewards, so the default grade is their weighted sum: 0.5 x odd_length + 1 x digit reversal."""
    (root / "odd.py").write_text(ODD_LENGTH)
    path = root / "recipe.yaml"
    path.write_text(
        f"model: {{name_or_path: {model}}}\n"
        f"data: {{path: {data}, num_rows: {ROWS}, solution_column: solution}}\n"
        f"rewards: [{{name: {root}/odd.py:odd_length, weight: 0.5}}, {REVERSAL}]\n"
        f"num_generations: {G}\nmax_completion_length: 6\noutput_dir: {root}/run\n{extra}"
    )
    return path


def _filter(args: list[str], capsys: pytest.CaptureFixture[str]) -> tuple[int, str, str]:
    code = gspo_trl_main(["filter", *args])
    captured = capsys.readouterr()
    return code, captured.out, captured.err


@pytest.fixture(scope="module")
def filtered(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    root = tmp_path_factory.mktemp("filter")
    recipe = _recipe(root, str(tiny_model_dir(root)))
    output = root / "out" / "kept.jsonl"
    args = [str(recipe), "--min", str(LOW), "--max", str(HIGH), "--pass-threshold", str(THRESHOLD)]
    args += ["--chunk-size", str(CHUNK), "--output", str(output), "--engine", "hf"]
    assert gspo_trl_main(["filter", *args]) == 0
    return {"root": root, "recipe": recipe, "output": output, "args": args}


def _chunks(output: Path) -> list[dict[str, Any]]:
    work = output.with_name(output.name + ".work")
    return [
        json.loads(line)
        for path in sorted(work.glob("chunk-*.jsonl"))
        for line in path.read_text().splitlines()
    ]


def test_pass_rates_agree_with_an_independent_recount(filtered: dict[str, Any]) -> None:
    records = _chunks(filtered["output"])
    source = make_rl_rows(ROWS, 0)  # the synthetic task's rows for seed 0, as the recipe loads them
    assert [r["index"] for r in records] == list(range(ROWS))
    recount = []
    for record, row in zip(records, source, strict=True):
        assert len(record["completions"]) == G
        odd = [float(len(c) % 2) for c in record["completions"]]
        reversal = digit_reversal_reward(record["completions"], [row["solution"]] * G)
        scores = [0.5 * a + b for a, b in zip(odd, reversal, strict=True)]
        recount.append(sum(score >= THRESHOLD for score in scores) / G)
    assert [r["pass_rate"] for r in records] == recount
    assert len(set(recount)) > 1, "all prompts scored alike: the recount would prove little"

    kept = [json.loads(line) for line in filtered["output"].read_text().splitlines()]
    expected = [
        dict(row, pass_rate=rate) for row, rate in zip(source, recount, strict=True) if LOW <= rate <= HIGH
    ]
    assert kept == expected  # source columns as read, in order, plus pass_rate
    assert 0 < len(kept) < ROWS, "the range should keep some rows and drop others here"

    summary = json.loads(filtered["output"].with_suffix(".summary.json").read_text())
    assert summary["kept"] == len(kept) and summary["rows"] == ROWS
    for c in range(G + 1):
        line = next(ln for ln in summary["histogram"].splitlines() if ln.strip().startswith(f"{c / G:.3f}"))
        assert int(line.split()[1]) == sum(rate == c / G for rate in recount)
    png = Path(summary["histogram_png"]).read_bytes()
    assert png[:8] == b"\x89PNG\r\n\x1a\n" and len(png) > 5000


def test_resume_skips_finished_chunks_and_reproduces_the_output(
    filtered: dict[str, Any], capsys: pytest.CaptureFixture[str]
) -> None:
    output: Path = filtered["output"]
    work = output.with_name(output.name + ".work")
    before = {p.name: p.read_text() for p in work.glob("chunk-*.jsonl")}
    kept_before = output.read_text()
    first_mtime = (work / "chunk-00000.jsonl").stat().st_mtime_ns
    (work / "chunk-00001.jsonl").unlink()  # as if interrupted during the second chunk

    code, _, err = _filter([*filtered["args"], "--resume"], capsys)
    assert code == 0, err
    assert (work / "chunk-00000.jsonl").stat().st_mtime_ns == first_mtime  # not sampled again
    assert {p.name: p.read_text() for p in work.glob("chunk-*.jsonl")} == before
    assert output.read_text() == kept_before

    code, _, err = _filter([*filtered["args"], "--resume", "--num-samples", "2"], capsys)
    assert code == 2 and "different num_samples" in err.strip().splitlines()[-1]


def test_parquet_output_keeps_rows_in_range(tmp_path: Path) -> None:
    raw = Dataset.from_list([{"prompt": f"p{i}", "pass_rate": -1.0} for i in range(5)])
    settings = parse_args(["r.yaml", "--min", "0.2", "--max", "0.6", "--output", str(tmp_path / "k.parquet")])
    write_rows(raw, [0.0, 0.2, 0.4, 0.6, 0.8], settings)
    kept = Dataset.from_parquet(str(tmp_path / "k.parquet"))
    assert kept["prompt"] == ["p1", "p2", "p3"] and kept["pass_rate"] == [0.2, 0.4, 0.6]


@pytest.mark.parametrize(
    ("case", "message"),
    [
        ("missing_column", r"needs dataset column\(s\) \['solution'\]"),
        ("empty", r"empty\.jsonl is empty"),
        ("no_model", r"model '/nonexistent/tiny-model': no such directory"),
        ("push_offline", r"--push-to-hub 'me/filtered': HF_HUB_OFFLINE"),
        ("bad_range", r"--min 0\.9 / --max 0\.1"),
        ("bad_suffix", r"--output .*kept\.txt.*\.jsonl or \.parquet"),
    ],
)
def test_bad_input_is_a_one_line_error_naming_it(
    case: str, message: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "no_solution.jsonl").write_text(json.dumps({"prompt": "reverse 123"}) + "\n")
    (tmp_path / "empty.jsonl").write_text("")
    model, data, options = "/nonexistent/tiny-model", "synthetic:reversal", []
    if case == "missing_column":
        data = str(tmp_path / "no_solution.jsonl")
    elif case == "empty":
        data = str(tmp_path / "empty.jsonl")
    elif case == "push_offline":
        options = ["--push-to-hub", "me/filtered"]
    elif case == "bad_range":
        options = ["--min", "0.9", "--max", "0.1"]
    elif case == "bad_suffix":
        options = ["--output", str(tmp_path / "kept.txt")]
    recipe = _recipe(tmp_path, model, data)
    code, _, err = _filter([str(recipe), "--output", str(tmp_path / "kept.jsonl"), *options], capsys)
    last = err.strip().splitlines()[-1]
    assert code == 2 and last.startswith("error: ") and "Traceback" not in err
    assert re.search(message, last), err


def _constant(values: list[float | None]) -> Any:
    return lambda completions, **_: list(values)


@pytest.mark.parametrize(
    ("first", "second", "expected"),
    [
        ([1.0, 0.0], [0.5, 0.5], [2.0, 1.0]),  # 1 x first + 2 x second
        ([None, 1.0], [0.5, None], [1.0, 1.0]),  # a None reward is skipped, as TRL does
        ([float("nan"), None], [0.25, None], [0.5, None]),  # NaN too; all-None stays None
    ],
)
def test_combined_reward_is_the_weighted_sum(first: list, second: list, expected: list) -> None:
    from gspo_trl.eval.filter import combined_reward

    assert combined_reward([_constant(first), _constant(second)], [1.0, 2.0])(["a", "b"]) == expected


@pytest.mark.parametrize(
    ("rate", "low", "high", "kept"),
    [(0.1, 0.1, 0.9, True), (1 / 10 * 9, 0.1, 0.9, True), (0.0, 0.1, 0.9, False), (1.0, 0.1, 0.9, False)],
)
def test_range_edges_are_inclusive(rate: float, low: float, high: float, kept: bool) -> None:
    from gspo_trl.eval.histogram import counts_by_rate, in_range

    assert in_range(rate, low, high) is kept
    assert counts_by_rate([0.0, 0.1, 0.1, 1.0], 10)[1] == (0.1, 2)


def test_filter_by_one_named_reward(filtered: dict[str, Any], capsys: pytest.CaptureFixture[str]) -> None:
    """`--reward` grades with that reward alone: here partial-credit digit reversal at 0.1."""
    output = filtered["root"] / "one" / "kept.jsonl"
    args = [
        str(filtered["recipe"]),
        "--reward",
        REVERSAL,
        "--pass-threshold",
        "0.1",
        "--min",
        "0",
        "--max",
        "1",
    ]
    code, _, err = _filter([*args, "--output", str(output), "--engine", "hf", "--data.num_rows", "4"], capsys)
    assert code == 0, err
    source = make_rl_rows(4, 0)
    for record, row in zip(_chunks(output), source, strict=True):
        scores = digit_reversal_reward(record["completions"], [row["solution"]] * G)
        assert record["rewards"] == scores
        assert record["pass_rate"] == sum(score >= 0.1 for score in scores) / G
    assert len(output.read_text().splitlines()) == 4  # [0, 1] keeps everything


def test_filter_dataset_in_python_rereads_the_command_run(filtered: dict[str, Any]) -> None:
    """`gspo_trl.filter_dataset(FilterSettings(...))`, no argparse, on the command's finished work:
    the same settings resume every chunk, so the pass rates and the kept rows are the command's."""
    from gspo_trl import FilterResult, FilterSettings, filter_dataset

    settings = FilterSettings(
        recipe=filtered["recipe"],
        low=LOW,
        high=HIGH,
        pass_threshold=THRESHOLD,
        chunk_size=CHUNK,
        output=filtered["output"],
        engine="hf",
        resume=True,
    )
    kept_before = filtered["output"].read_text()
    result = filter_dataset(settings)
    assert isinstance(result, FilterResult)
    assert result.pass_rates == [r["pass_rate"] for r in _chunks(filtered["output"])]
    assert result.kept == len(kept_before.splitlines()) and filtered["output"].read_text() == kept_before
    summary = json.loads(filtered["output"].with_suffix(".summary.json").read_text())
    assert summary == json.loads(json.dumps(result.summary()))


@pytest.mark.parametrize(
    ("options", "message"),
    [
        ({"low": 0.9, "high": 0.1}, r"--min 0\.9 / --max 0\.1"),
        ({"output": "kept.txt"}, r"\.jsonl or \.parquet"),
        ({"chunk_size": 0}, r"--chunk-size"),
    ],
)
def test_filter_settings_refuse_what_cannot_work(options: dict[str, Any], message: str) -> None:
    from gspo_trl import FilterSettings
    from gspo_trl.core.errors import FilterError

    with pytest.raises(FilterError, match=message):
        FilterSettings(recipe="r.yaml", **options)
