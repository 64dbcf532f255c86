"""The ``algorithm`` config group: one preset per algorithm (unirl/recipe/conf/algorithm/NAME.yaml), each setting every
recipe field that defines the algorithm, so that ``algorithm=dapo`` means the same experiment on every backend.

Precedence, lowest first: the default preset (grpo), the recipe file's own ``algorithm:`` values, a preset chosen on
the command line (``algorithm=NAME``, also in a sweep), then ``algorithm.FIELD=...`` overrides. Hydra merges the group
before the recipe (conf/config.yaml), so a recipe's values win over the default preset; a preset the user names on
the command line must win over the recipe too (``recipe=gsm8k_grpo algorithm=dr_grpo`` is Dr. GRPO, not GRPO with
Dr. GRPO's name), which :func:`apply_chosen_preset` restores after composition, naming each field it changed.
"""

from __future__ import annotations

import functools
import importlib.resources
import logging
from collections.abc import Sequence
from typing import Any

from unirl.errors import FieldError
from unirl.recipe.schema import ALGORITHMS

log = logging.getLogger("unirl")
GROUP = "algorithm"
PRESETS_PACKAGE = "unirl.recipe.conf"


@functools.cache
def preset_fields(name: str) -> dict[str, Any]:
    """The fields preset ``name`` sets (its YAML file), field -> value."""
    import yaml

    if name not in ALGORITHMS:
        raise FieldError(GROUP, name, f"one of {list(ALGORITHMS)}")
    text = importlib.resources.files(PRESETS_PACKAGE).joinpath(GROUP, f"{name}.yaml").read_text()
    fields = yaml.safe_load(text)
    if not isinstance(fields, dict):
        raise TypeError(f"conf/{GROUP}/{name}.yaml is not a mapping")
    return fields


def _key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~").strip()


def chosen_on_command_line(overrides: Sequence[str]) -> str | None:
    """The preset an override list selects (``algorithm=NAME``, ``+algorithm=`` / ``++algorithm=``), else None."""
    chosen = None
    for override in overrides:
        if "=" in override and _key(override) == GROUP:
            chosen = override.split("=", 1)[1].strip()
    return chosen


def apply_chosen_preset(cfg: Any, overrides: Sequence[str], composed: str | None) -> list[tuple[str, Any, Any]]:
    """Make a command-line preset win over the recipe file (see the module docstring): every field of the preset that
    no ``algorithm.FIELD=`` override sets takes the preset's value. Returns (field, recipe's value, preset's value)
    for each field changed, also logged. Without a preset on the command line, a recipe whose ``algorithm.name`` is
    not the composed preset is refused: the name would claim an algorithm whose fields were not applied."""
    from omegaconf import open_dict

    chosen = chosen_on_command_line(overrides)
    if chosen is None:
        named = cfg[GROUP].get("name")
        if composed and named != composed:
            raise FieldError("algorithm.name", named,
                             f"{composed!r}, the preset composed (algorithm={composed}, the default unless given): "
                             f"algorithm.name does not select the preset; pass algorithm={named} instead, which sets "
                             "every field that defines it")
        return []
    on_command_line = {_key(o) for o in overrides if "=" in o}
    changed: list[tuple[str, Any, Any]] = []
    with open_dict(cfg):
        for field, value in preset_fields(chosen).items():
            if f"{GROUP}.{field}" in on_command_line:
                continue
            before = cfg[GROUP].get(field)
            if before != value:
                changed.append((field, before, value))
                cfg[GROUP][field] = value
    if changed:
        log.info("algorithm=%s over the recipe's own values: %s", chosen,
                 ", ".join(f"{f}={new!r} (recipe: {old!r})" for f, old, new in changed))
    return changed
