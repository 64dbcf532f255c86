"""A real model left with the toy recipe's settings: one warning naming each such field.

The embedded default (``recipes/grpo_math.yaml``) is tuned for ``builtin:tiny-arith``: two new tokens, a learning
rate of 1e-3 and arithmetic shaping rewards. Pointing only ``model.path`` at a hub or local model keeps those, and
the run then trains a real model on one-digit completions at a learning rate that wrecks it; nothing fails, the
curves just stay flat. :func:`warn_toy_settings` says so once, at plan and run time (``unirl.host.planning.check``).
"""

from __future__ import annotations

import logging

from unirl.recipe.schema import Recipe

log = logging.getLogger(__name__)

TOY_MAX_NEW_TOKENS = 4  # at most this many: one-digit answers (the toy uses 2)
TOY_LR = 1e-4  # at least this: tiny-model territory (the toy uses 1e-3; real recipes use 1e-6 to 3e-6)
TOY_REWARDS = ("numeric_closeness", "bare_number")  # shaping for single-number arithmetic answers
REAL_RECIPE = ("a real recipe (recipe=gsm8k_grpo) uses algorithm.max_new_tokens=1024, algorithm.lr=1e-06 and "
               "rewards=[math_answer]")


def toy_settings(recipe: Recipe) -> list[str]:
    """``field=value`` for each toy setting a non-builtin model would inherit; empty for builtin models."""
    if recipe.model.path.startswith("builtin:"):
        return []
    found = []
    if recipe.algorithm.max_new_tokens <= TOY_MAX_NEW_TOKENS:
        found.append(f"algorithm.max_new_tokens={recipe.algorithm.max_new_tokens}")
    if recipe.algorithm.lr >= TOY_LR:
        found.append(f"algorithm.lr={recipe.algorithm.lr:g}")
    shaping = [spec.name for spec in recipe.rewards if spec.name in TOY_REWARDS]
    if shaping:
        found.append(f"rewards={shaping}")
    return found


def warn_toy_settings(recipe: Recipe) -> None:
    """Log one warning when ``model.path`` is a real model and the recipe has the toy's settings."""
    found = toy_settings(recipe)
    if not found:
        return
    log.warning("model.path=%s is not a builtin model but the recipe has settings sized for the toy arithmetic task "
                "(%s); %s", recipe.model.path, ", ".join(found), REAL_RECIPE,
                extra={"once": True})  # the preflight and the run both check the recipe: said once a command
