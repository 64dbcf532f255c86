"""Shell completion: verbs, recipe fields (``algorithm.lr=``) and config group options (``recipe=grpo_math``).

    eval "$(unirl --completion bash)"     # in ~/.bashrc;  zsh: autoload -U bashcompinit && bashcompinit first

The shell asks ``unirl __complete WORD`` for candidates; answering needs no Hydra and no backend import.
"""

from __future__ import annotations

import dataclasses
from typing import Any

BASH = r"""_unirl_complete() {
    local cur="${COMP_WORDS[COMP_CWORD]}"
    COMPREPLY=( $(unirl __complete "$COMP_CWORD" "$cur" "${COMP_WORDS[1]}" 2>/dev/null) )
    [[ ${#COMPREPLY[@]} -eq 1 && ${COMPREPLY[0]} == *= ]] && compopt -o nospace
}
complete -F _unirl_complete unirl
"""

VERB_FLAGS = {
    "plan": ["--json", "--validate", "--help"], "diff": ["--json", "--help"], "compare": ["--json", "--help"],
    "resume": ["--force", "--help"], "stop": ["--help"], "plugins": ["--json"], "frameworks": ["--json"],
    "rewards": ["--json"], "reward": ["test"], "environments": ["--json"], "env": ["test"],
    "show": ["--step", "--worst", "--best", "--errors", "--prompt", "--limit", "--json", "--help"],
    "report": ["-o", "--help"],
    "advise": ["--gpus", "--nodes", "--model-size", "--gpu-memory", "--async", "--engine", "--json", "--help"],
}


def recipe_fields() -> list[str]:
    """Every settable recipe field as ``dotted.name=`` (free-form dicts as ``name.``)."""
    from unirl.recipe.schema import Recipe

    found: list[str] = []

    def walk(cls: Any, prefix: str) -> None:
        for field in dataclasses.fields(cls):
            default = field.default_factory() if field.default_factory is not dataclasses.MISSING else field.default
            if dataclasses.is_dataclass(default):
                walk(type(default), f"{prefix}{field.name}.")
            elif isinstance(default, list) and default and dataclasses.is_dataclass(default[0]):
                walk(type(default[0]), f"{prefix}{field.name}.0.")
            elif isinstance(default, dict):
                found.append(f"+{prefix}{field.name}.")
            else:
                found.append(f"{prefix}{field.name}=")

    walk(Recipe, "")
    return found


def candidates(position: int, current: str, verb: str, verbs: list[str]) -> list[str]:
    """What may come next on the command line: ``verbs`` (the dispatch's, :data:`unirl.cli.main.VERBS`) and the
    top-level flags in first place, a verb's flags after it, and recipe fields and group options."""
    words: list[str] = []
    if position == 1:
        words += [*verbs, "--help", "--version", "-m", "-v", "--verbose", "-q", "--quiet"]
    elif verb in VERB_FLAGS:
        words += VERB_FLAGS[verb]
    if verb not in ("stop", "compare", "show", "report", "plugins", "frameworks", "rewards", "reward", "advise",
                    "environments", "env") \
            or position == 1:
        words += group_options() + recipe_fields()
    return sorted(w for w in set(words) if w.startswith(current))


def group_options() -> list[str]:
    from unirl.host.manager import get_host
    from unirl.recipe.compose import shipped_recipes

    host = get_host()
    options = [f"recipe={name}" for name in shipped_recipes()]
    options += [f"framework={name}" for name in host.frameworks.names()]
    options += [f"scheduler={name}" for name in host.schedulers.names()]
    return options
