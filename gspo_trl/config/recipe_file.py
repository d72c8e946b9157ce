"""Reading a recipe file: bounded in size, strict YAML (no key twice), errors naming the file.

A missing file that is a typo of a shipped recipe's name (`tiny/reversl`) is answered with
the name meant, as a mistyped key is.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from gspo_trl.config.shipped import shipped_name, shipped_recipes
from gspo_trl.core.errors import RecipeError
from gspo_trl.core.suggest import did_you_mean


class _UniqueKeyLoader(yaml.SafeLoader):
    """SafeLoader that refuses a key given twice in one mapping (PyYAML keeps the last), and a
    document whose aliases expand it past MAX_EXPANDED_NODES (a "billion laughs": PyYAML shares
    the aliased objects, and the first walk over them, such as writing run.json, expands them)."""

    def compose_document(self) -> yaml.Node:
        document = super().compose_document()
        if document is not None:
            _check_expanded_size(document, self.name)
        return document

    def construct_mapping(self, node: yaml.MappingNode, deep: bool = False) -> dict[Any, Any]:
        seen = set()
        for key_node, _ in node.value:
            key = self.construct_object(key_node, deep=deep)
            if key in seen:
                raise yaml.constructor.ConstructorError(
                    None, None, f"duplicate key {key!r}", key_node.start_mark
                )
            seen.add(key)
        return super().construct_mapping(node, deep=deep)


RESOLVED_RECIPE = "recipe.yaml"
"""Written into output_dir before training: the recipe with defaults and overrides applied
(read back by `gspo-trl eval RUN_DIR`, so it grades as the run trained)."""


def _check_expanded_size(root: yaml.Node, name: str) -> None:
    """Count the nodes of the document with every alias written out (each shared node counted
    once per use, memoised, so the count itself costs one pass over the file's own nodes)."""
    sizes: dict[int, int] = {}
    stack: list[tuple[yaml.Node, bool]] = [(root, False)]
    while stack:  # post-order without recursion: an alias chain is as deep as the file allows
        node, children_done = stack.pop()
        if id(node) in sizes:
            continue
        children = (
            [part for pair in node.value for part in pair]
            if isinstance(node, yaml.MappingNode)
            else node.value
            if isinstance(node, yaml.SequenceNode)
            else []
        )
        if children_done:
            sizes[id(node)] = 1 + sum(sizes[id(child)] for child in children)
            if sizes[id(node)] > MAX_EXPANDED_NODES:
                raise RecipeError(
                    f"recipe {name}: its aliases (*name) expand it to more than {MAX_EXPANDED_NODES:,} "
                    "values, "
                    "more than any recipe within the size limit holds written out; write the values out "
                    "or use fewer nested aliases"
                )
        else:
            stack.append((node, True))
            stack.extend((child, False) for child in children if id(child) not in sizes)


MAX_RECIPE_BYTES = 256 << 10
"""A recipe is a page of keys (the largest shipped one is under 5 KB), and PyYAML's safe loader
takes seconds per 100 KB (26 s for 1.3 MB on this project's 2-core machine): a larger file is
a mistake (a data file given as the recipe), refused before it is parsed."""


MAX_EXPANDED_NODES = MAX_RECIPE_BYTES // 2
"""The most values a recipe of MAX_RECIPE_BYTES can hold written out (each takes at least two
bytes: a character and a separator); aliases may not make a document larger than that."""


def _read_bounded(path: Path) -> str:
    """The file's text, reading at most MAX_RECIPE_BYTES + 1 bytes (a FIFO or /dev/zero too)."""
    with path.open("rb") as file:
        data = file.read(MAX_RECIPE_BYTES + 1)
    if len(data) > MAX_RECIPE_BYTES:
        raise RecipeError(
            f"recipe {path}: larger than {MAX_RECIPE_BYTES >> 10} KiB, not a recipe "
            "(a data file goes in data.path)"
        )
    return data.decode("utf-8")


def load_yaml_text(text: str, name: str) -> Any:
    """YAML text through the recipe loader (no duplicate keys, bounded alias expansion); `name`
    is what its errors name. Raises yaml.YAMLError or RecipeError."""
    loader = _UniqueKeyLoader(text)
    loader.name = name  # what a refusal of its expanded size names
    try:
        return loader.get_single_data()
    finally:
        loader.dispose()


def read_yaml(path: str | Path) -> dict[str, Any]:
    """The recipe file as a mapping, or a RecipeError naming the file (and line for syntax)."""
    path = Path(path)
    try:
        text = _read_bounded(path)
    except FileNotFoundError:
        hint = did_you_mean(shipped_name(str(path)), shipped_recipes())
        raise RecipeError(
            f"recipe {path}: file not found{hint} (shipped recipes: `gspo-trl recipes list`)"
        ) from None
    except (OSError, UnicodeDecodeError) as error:
        raise RecipeError(f"recipe {path}: cannot read it ({error})") from None
    try:
        content = load_yaml_text(text, str(path))
    except yaml.YAMLError as error:
        mark = getattr(error, "problem_mark", None)
        where = f" line {mark.line + 1}, column {mark.column + 1}" if mark else ""
        problem = getattr(error, "problem", None) or str(error)
        raise RecipeError(f"recipe {path}:{where}: YAML error: {problem}") from None
    if content is None:
        return {}
    if not isinstance(content, dict):
        raise RecipeError(f"recipe {path}: must be a mapping of keys to values, got {type(content).__name__}")
    return content
