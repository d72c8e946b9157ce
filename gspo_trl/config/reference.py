"""docs/recipe-reference.md, generated from the recipe's dataclasses so it cannot drift.

Every section key with its type, default and the docstring written under it in
gspo_trl.config.sections; the top-level recipe keys; the algorithms' GRPOConfig defaults; and
the TRL / open-r1 keys that live elsewhere in a recipe. Regenerate with

    python -m gspo_trl.config.reference > docs/recipe-reference.md

(tests/config/test_recipe_reference.py fails when the file is out of date).
"""

from __future__ import annotations

import ast
import dataclasses
import inspect
import itertools
import json
from typing import Any

from gspo_trl.config import sections
from gspo_trl.config.batch import RolloutBatch, rollout_batch
from gspo_trl.config.defaults import ALGORITHMS, GSPO_DEFAULTS
from gspo_trl.config.recipe import MOVED_KEYS

SECTION_CLASSES = tuple(
    (f"{section.name}[]" if section.absent == "list" else section.name, section.kind)
    for section in sections.SECTIONS
)
TOP_LEVEL = (
    ("algorithm", "str", "gspo", "gspo | gspo_token | grpo: which defaults below the recipe starts from."),
    (
        "allow_on_policy",
        "bool",
        "false",
        "Accept a run whose every update is on-policy (s_i = 1: GSPO degenerates to GRPO).",
    ),
    (
        "packing",
        "bool",
        "false",
        "Run pi_old's, the reference's and the updates' forwards on the rows' real tokens packed "
        "without padding: the same log-probs and loss, fewer tokens (docs/performance.md, Packing).",
    ),
    (
        "imports",
        "list[str]",
        "[]",
        "Modules (pkg.mod, or path/file.py) imported before the rewards resolve; the working "
        "directory is on sys.path. They register custom rewards with `@rewards.register`.",
    ),
    ("any GRPOConfig field", "", "", "At the top level, e.g. `learning_rate: 1.0e-6` (TRL's own docs)."),
)


def attribute_docs(cls: type) -> dict[str, str]:
    """The string literal written under each field of a dataclass (PEP 257 attribute docstrings)."""
    tree = ast.parse(inspect.getsource(cls))
    body = tree.body[0].body  # type: ignore[attr-defined]
    docs = {}
    for node, following in itertools.pairwise(body):
        if (
            isinstance(node, ast.AnnAssign)
            and isinstance(node.target, ast.Name)
            and isinstance(following, ast.Expr)
            and isinstance(following.value, ast.Constant)
            and isinstance(following.value.value, str)
        ):
            docs[node.target.id] = " ".join(following.value.value.split())
    return {**_docstring_keys(cls), **docs}


def _docstring_keys(cls: type) -> dict[str, str]:
    """`name: meaning` entries of a class docstring (continuation lines indented), by name."""
    fields = {field.name for field in dataclasses.fields(cls)}
    docs: dict[str, str] = {}
    current = None
    for line in (inspect.getdoc(cls) or "").splitlines():
        name, colon, text = line.partition(":")
        if colon and name in fields:
            current, docs[name] = name, text.strip()
        elif current and line.startswith(" "):
            docs[current] += " " + line.strip()
        else:
            current = None
    return docs


def _default(field: dataclasses.Field) -> str:
    if field.default is not dataclasses.MISSING:
        value: Any = field.default
    elif field.default_factory is not dataclasses.MISSING:
        value = field.default_factory()
    else:
        return "(required)"
    if value is None or isinstance(value, bool):
        return {None: "null", True: "true", False: "false"}[value]
    if isinstance(value, tuple):
        value = list(value)
    return value if isinstance(value, str) else json.dumps(value)


def _cell(text: str) -> str:
    return text.replace("|", "\\|")


YAML_KEYS = {(sections.RewardEntry, "spec"): "name", (sections.RewardEntry, "params"): "(any other key)"}
"""Fields whose YAML spelling differs from the dataclass field name."""
EXTRA_DOCS = {
    (sections.RewardEntry, "spec"): "A registered reward (`gspo-trl rewards list`) or a path: "
    "`pkg.module:function`, `path/file.py:function`. A plain string item is just the name.",
    (sections.RewardEntry, "weight"): "Its weight in the summed reward (GRPOConfig.reward_weights).",
    (sections.RewardEntry, "params"): "The reward's own parameters (`gspo-trl rewards describe NAME`); "
    "`label` renames its metric.",
}


def _section_table(name: str, cls: type) -> list[str]:
    docs = {**attribute_docs(cls), **{f: text for (c, f), text in EXTRA_DOCS.items() if c is cls}}
    class_doc = " ".join((inspect.getdoc(cls) or "").split("\n\n")[0].split())
    lines = [f"## `{name}`", "", class_doc, "", "| key | type | default | meaning |", "|---|---|---|---|"]
    for field in dataclasses.fields(cls):
        kind = field.type if isinstance(field.type, str) else getattr(field.type, "__name__", str(field.type))
        meaning = _cell(docs.get(field.name, ""))
        key = YAML_KEYS.get((cls, field.name), field.name)
        lines.append(f"| `{key}` | `{_cell(kind)}` | `{_cell(_default(field))}` | {meaning} |")
    return [*lines, ""]


def _batch_section() -> list[str]:
    example = rollout_batch(GSPO_DEFAULTS, 8)
    return [
        "## Rollout batch arithmetic",
        "",
        " ".join((inspect.getdoc(RolloutBatch) or "").split()),
        "",
        "At GSPO's defaults and TRL's (per_device_train_batch_size and num_generations left out) on",
        "8 GPUs (gspo_trl.config.batch; every recipe header carries this line for its own keys and",
        "`launch:` world size):",
        "",
        f"    {example.describe()}",
        "",
    ]


def recipe_reference() -> str:
    """The whole reference page, as Markdown."""
    lines = [
        "# Recipe reference",
        "",
        "<!-- Generated by `python -m gspo_trl.config.reference`; do not edit by hand. -->",
        "",
        "A recipe is a YAML file of model + data + rewards + any TRL `GRPOConfig` field. It is not a",
        "`trl grpo` config: TRL's script arguments (`dataset_name`, `model_name_or_path`, ...) live in",
        "the sections below (see the last table). Every key can be overridden on the command line",
        "with the same name: `--learning_rate 5e-7`, `--model.name_or_path Qwen/Qwen3-4B`,",
        "`--rewards.1.weight 0.5`.",
        "",
        "## Top-level keys",
        "",
        "| key | type | default | meaning |",
        "|---|---|---|---|",
        *(
            f"| `{k}` | `{t}` | `{d}` | {_cell(m)} |" if t else f"| {k} | | | {m} |"
            for k, t, d, m in TOP_LEVEL
        ),
        "",
    ]
    for name, cls in SECTION_CLASSES:
        lines += _section_table(name, cls)
    lines += _batch_section()
    keys = sorted({key for preset in ALGORITHMS.values() for key in preset})
    lines += [
        "## GRPOConfig defaults per `algorithm`",
        "",
        "A recipe starts from these (gspo_trl.config.defaults), not from TRL's own defaults.",
        "",
        "| GRPOConfig field | " + " | ".join(f"`{name}`" for name in ALGORITHMS) + " |",
        "|---|" + "---|" * len(ALGORITHMS),
        *(
            f"| `{key}` | " + " | ".join(f"`{preset.get(key)!r}`" for preset in ALGORITHMS.values()) + " |"
            for key in keys
        ),
        "",
        "## TRL and open-r1 keys, and where they go",
        "",
        "| key elsewhere | in a recipe |",
        "|---|---|",
        *(f"| `{key}` | {_cell(target)} |" for key, target in MOVED_KEYS.items()),
        "",
    ]
    return "\n".join(lines)


if __name__ == "__main__":
    print(recipe_reference(), end="")
