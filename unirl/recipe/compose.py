"""Recipes as Hydra sees them: the shipped recipes, a user's recipe file, the composed config as a typed Recipe,
and keys the schema does not know. What needs the loaded plugins (registering their config groups, composing,
planning) is the host's: :mod:`unirl.host.planning`.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from unirl.errors import UnirlError
from unirl.recipe.schema import Recipe

CONFIG_MODULE = "unirl.recipe.conf"
RECIPES_PACKAGE = "unirl.recipe.recipes"


def shipped_recipes() -> dict[str, Any]:
    """Recipe name -> file, for the recipes packaged with unirl."""
    return {
        entry.name.removesuffix(".yaml"): entry
        for entry in importlib.resources.files(RECIPES_PACKAGE).iterdir()
        if entry.name.endswith(".yaml")
    }


def register_recipe_file(path: Path) -> str:
    """Make a user's recipe file selectable as ``recipe=<stem>``; returns that name."""
    import yaml
    from hydra.core.config_store import ConfigStore
    from omegaconf import DictConfig, OmegaConf
    from omegaconf.errors import OmegaConfBaseException

    from unirl.errors import FieldError

    try:
        node = OmegaConf.load(path)
    except (yaml.YAMLError, OmegaConfBaseException, UnicodeDecodeError) as exc:
        reason = " ".join(str(exc).split())
        raise FieldError("recipe", str(path), f"a YAML file of recipe fields; it is not valid YAML ({reason})") \
            from None
    if not isinstance(node, DictConfig):
        raise FieldError("recipe", str(path), f"a YAML mapping of recipe fields (model:, data:, algorithm:, ...); "
                                              f"it holds a {type(node).__name__.replace('Config', '').lower()}")
    from unirl.errors import RecipeInvalid

    unknown = unknown_file_keys(node)
    if unknown:
        raise RecipeInvalid(unknown, context=f"recipe file {path}")
    ConfigStore.instance().store(group="recipe", name=path.stem, node=node, package="_global_")
    return path.stem


def unknown_file_keys(node: Any) -> list[Any]:
    """A recipe file's keys checked against the schema, before Hydra merges it (and its error loses the file)."""
    from omegaconf import OmegaConf

    from unirl.recipe.schema import Recipe

    merged = OmegaConf.structured(Recipe)
    OmegaConf.set_struct(merged, False)
    try:
        OmegaConf.set_struct(merged, False)
        merged = OmegaConf.merge(merged, {k: v for k, v in node.items() if k not in ("defaults", "hydra")})
    except Exception:  # a type error: Hydra's composition reports it with the value
        return []
    return unknown_keys(merged)


def to_recipe(cfg: Any) -> Recipe:
    """The typed Recipe from a composed config (composition already typed it against ``unirl_schema``)."""
    from omegaconf import OmegaConf

    from unirl.errors import RecipeInvalid

    unknown = unknown_keys(cfg)
    if unknown:
        raise RecipeInvalid(unknown)
    # The composed config is already typed by unirl_schema, so conversion is direct and cheap.
    recipe = OmegaConf.to_object(cfg)
    if not isinstance(recipe, Recipe):
        raise UnirlError(f"the composed config is not a unirl recipe (got {type(recipe).__name__}); "
                         "is unirl_schema first in the defaults list?")
    return recipe


def unknown_keys(cfg: Any, prefix: str = "") -> list[Any]:
    """Keys the schema does not define, each a FieldError naming the closest field.

    Hydra's ``+group.key=value`` (the form its own error message suggests for a typo) appends a key even to a
    typed node, and converting to the dataclass then drops it: ``+algorithm.lrr=1e-6`` would run with the default
    learning rate and say nothing. Free-form dicts (``data.options``, ``rewards[i].kwargs``, ``framework``,
    ``scheduler``) take any key.
    """
    import dataclasses
    import difflib

    from omegaconf import DictConfig, ListConfig, OmegaConf

    from unirl.errors import FieldError

    found: list[Any] = []
    if isinstance(cfg, ListConfig):
        for i, item in enumerate(cfg):
            found += unknown_keys(item, f"{prefix[:-1]}[{i}].")
        return found
    if not isinstance(cfg, DictConfig):
        return found
    schema = OmegaConf.get_type(cfg)
    if schema is None or not dataclasses.is_dataclass(schema):
        return found  # a free-form dict
    fields = {f.name for f in dataclasses.fields(schema)}
    for key in cfg:
        name = f"{prefix}{key!s}"
        if key not in fields:
            close = difflib.get_close_matches(str(key), sorted(fields), n=1, cutoff=0.6)
            hint = f"did you mean {prefix}{close[0]}? " if close else ""
            found.append(FieldError(name, OmegaConf.select(cfg, str(key), throw_on_missing=False),
                                    f"no such field; {hint}{prefix.rstrip('.') or 'the recipe'} has "
                                    f"{sorted(fields)} (`unirl plan --json` shows every field)"))
        else:
            child = cfg._get_node(key)
            if isinstance(child, DictConfig | ListConfig):
                found += unknown_keys(child, f"{name}.")
    return found
