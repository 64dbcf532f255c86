"""Hydra composition: register every config node the plugins provide, then compose a Recipe.

Registration must happen before Hydra composes (Hydra reads only what its ConfigStore and search
path hold), so the CLI calls :func:`register_configs` first, for runs, plans and sweeps alike.
"""

from __future__ import annotations

import importlib.resources
from pathlib import Path
from typing import Any

from unirl.errors import UnirlError
from unirl.plan import LaunchPlan
from unirl.plugins import Host
from unirl.recipe import Recipe

CONFIG_MODULE = "unirl.conf"
RECIPES_PACKAGE = "unirl.recipes"
_REGISTERED: set[int] = set()


def shipped_recipes() -> dict[str, Any]:
    """Recipe name -> file, for the recipes packaged with unirl."""
    return {
        entry.name.removesuffix(".yaml"): entry
        for entry in importlib.resources.files(RECIPES_PACKAGE).iterdir()
        if entry.name.endswith(".yaml")
    }


def register_recipe_file(path: Path) -> str:
    """Make a user's recipe file selectable as ``recipe=<stem>``; returns that name."""
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    ConfigStore.instance().store(group="recipe", name=path.stem, node=OmegaConf.load(path), package="_global_")
    return path.stem


def register_configs(host: Host) -> None:
    """Store the schema, the recipes, and one option per framework and scheduler in Hydra's ConfigStore."""
    if id(host) in _REGISTERED:
        return
    from hydra.core.config_store import ConfigStore
    from omegaconf import OmegaConf

    cs = ConfigStore.instance()
    cs.store(name="unirl_schema", node=Recipe)
    for name, resource in shipped_recipes().items():
        cs.store(group="recipe", name=name, node=OmegaConf.create(resource.read_text()), package="_global_")
    for entry in host.frameworks:
        cs.store(group="framework", name=entry.name, node=dict(host.frameworks.get(entry.name).options),
                 package="framework")
    for entry in host.schedulers:
        cs.store(group="scheduler", name=entry.name, node=dict(host.schedulers.get(entry.name).options),
                 package="scheduler")
    host.pm.hook.unirl_add_configs(config_store=cs)
    _REGISTERED.add(id(host))


def compose(host: Host, overrides: list[str]) -> Any:
    """The composed config for ``overrides`` (no run directory is made)."""
    from hydra import compose as hydra_compose
    from hydra import initialize_config_module
    from hydra.core.global_hydra import GlobalHydra

    register_configs(host)
    GlobalHydra.instance().clear()
    with initialize_config_module(config_module=CONFIG_MODULE, version_base="1.3"):
        return hydra_compose(config_name="config", overrides=overrides)


def to_recipe(cfg: Any) -> Recipe:
    """The typed Recipe from a composed config (composition already typed it against ``unirl_schema``)."""
    from omegaconf import OmegaConf

    # The composed config is already typed by unirl_schema, so conversion is direct and cheap.
    recipe = OmegaConf.to_object(cfg)
    if not isinstance(recipe, Recipe):
        raise UnirlError(f"the composed config is not a unirl recipe (got {type(recipe).__name__}); "
                         "is unirl_schema first in the defaults list?")
    return recipe


def plan_recipe(host: Host, recipe: Recipe) -> LaunchPlan:
    """Validate the recipe and translate it with its framework's plugin (pure: nothing is launched)."""
    check(host, recipe)
    return host.frameworks.get(recipe.framework["name"]).plan(recipe)


def check(host: Host, recipe: Recipe) -> None:
    """Validate a recipe against the schema's ranges and what the loaded plugins provide."""
    from unirl.recipe import validate

    name = recipe.framework.get("name")
    if not name:
        raise UnirlError("no framework selected: pass framework=<name> (installed: "
                         f"{', '.join(host.frameworks.names()) or 'none'})")
    host.frameworks.entry(name)
    scheduler = recipe.scheduler.get("name")
    if scheduler:
        host.schedulers.entry(scheduler)
    from unirl.reward_spec import register_reward_files

    register_reward_files(recipe, host.rewards)
    validate(recipe, known_rewards=host.rewards.names())

