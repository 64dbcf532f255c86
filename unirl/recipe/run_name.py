"""The rule for ``run.name``: one path component, plain characters, no interpolation.

``run.name`` becomes a folder of the run directory (``$UNIRL_RUNS_DIR/<run.name>/<timestamp>``), so it must not
climb out (``../../x``), name an absolute path (``/etc``), be empty, or be longer than a filesystem allows. An
interpolation (``${oc.env:HOME}``) would be resolved by Hydra into the path before unirl sees it, and its value is
chosen by the environment, not the recipe: it is refused where it is written (the command line, a recipe file),
before Hydra resolves the output directory. Importing this module imports nothing heavy.
"""

from __future__ import annotations

import re
from collections.abc import Iterable
from importlib import resources
from typing import Any

from unirl.errors import FieldError

PATTERN = r"[A-Za-z0-9][A-Za-z0-9._-]{0,99}"
RUN_NAME = re.compile(PATTERN)
ALLOWED = (f"a run name is one folder name matching {PATTERN}: a letter or digit, then at most 99 letters, digits, "
           "'.', '_' or '-' (so no '/', no leading '.', no ${...} interpolation)")
INTERPOLATION = "${"


def problems(name: object) -> list[FieldError]:
    """The resolved ``run.name`` against the rule (what :func:`unirl.recipe.schema.validate` checks)."""
    if isinstance(name, str) and RUN_NAME.fullmatch(name):
        return []
    return [FieldError("run.name", name, ALLOWED)]


def _override_key(override: str) -> str:
    return override.split("=", 1)[0].lstrip("+~")


def raw_problems(overrides: Iterable[str]) -> list[FieldError]:
    """Interpolations in ``run.name`` where they are written: the command line and the selected recipe files.

    Runs before Hydra composes; the recipe files are those ``recipe=`` names (already registered in Hydra's
    ConfigStore by :func:`unirl.cli.run.normalise`), else the primary config's default recipe."""
    overrides = list(overrides)
    found: list[FieldError] = []
    for override in overrides:
        _, sep, value = override.partition("=")
        if sep and _override_key(override) in ("run.name", "run") and INTERPOLATION in value:
            found.append(FieldError("run.name", value, f"{ALLOWED} (the value is resolved from the environment "
                                                       "into the run directory's path)"))
    recipes = [value for o in overrides if _override_key(o) == "recipe" and "=" in o
               for value in o.split("=", 1)[1].split(",")] or [_default_recipe()]
    for recipe in dict.fromkeys(r.strip() for r in recipes if r.strip()):
        raw = _raw_recipe_run_name(recipe)
        if isinstance(raw, str) and INTERPOLATION in raw:
            found.append(FieldError("run.name", raw, f"{ALLOWED} (set by recipe {recipe!r})"))
    return found


def _default_recipe() -> str:
    """The recipe the primary config selects when the command line names none."""
    import yaml

    try:
        config = yaml.safe_load(resources.files("unirl.recipe.conf").joinpath("config.yaml").read_text())
        for entry in config.get("defaults", []):
            if isinstance(entry, dict) and "recipe" in entry:
                return str(entry["recipe"])
    except (OSError, ValueError, AttributeError, ModuleNotFoundError):
        pass
    return ""


def _raw_recipe_run_name(recipe: str) -> Any:
    """``run.name`` as the recipe writes it, uninterpolated; None when the recipe sets none or is unknown."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    try:
        node = ConfigStore.instance().load(f"recipe/{recipe}.yaml").node
    except Exception:  # not registered (Hydra reports an unknown recipe itself)
        return None
    raw = OmegaConf.to_container(node, resolve=False)
    run = raw.get("run") if isinstance(raw, dict) else None
    return run.get("name") if isinstance(run, dict) else None
