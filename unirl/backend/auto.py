"""``auto``: recipe fields whose right value differs by backend and machine, resolved by each backend for itself.

One recipe must plan on every backend, yet the backends disagree on what they can do: verl and NeMo RL always render
the chat template, OpenRLHF cannot evaluate before training, NeMo RL validates by sampling, the GPU backends need
GPUs and a vLLM or SGLang engine. A field left at ``auto`` takes, per backend, the first value of a short preference
list that the backend's own mapping table does not refuse (:meth:`unirl.backend.contract.Mapping.refusal`, the same
rule a plan applies to an explicit value), and the plan shows ``auto -> value (why)``. A value the user set is never
changed: a backend that cannot honour it refuses it, naming the field.
"""

from __future__ import annotations

import importlib.util
from collections.abc import Callable
from dataclasses import dataclass, replace
from typing import TYPE_CHECKING, Any, Protocol

from unirl.backend.environment import count_gpus
from unirl.backend.plan import AutoValue
from unirl.data.run_length import epoch_steps
from unirl.recipe.fields import AUTO, value_at
from unirl.recipe.schema import BUILTIN_PREFIX, Recipe

if TYPE_CHECKING:
    from unirl.backend.contract import Capabilities, Mapping

LOCAL_SCHEDULERS = (None, "", "local")
"""Schedulers that run on this machine: only there can the plan count the GPUs the run will have."""


@dataclass(frozen=True)
class Resolution:
    recipe: Recipe
    """The recipe with every ``auto`` replaced (explicit values untouched)."""
    values: tuple[AutoValue, ...]


class Backend(Protocol):
    """What resolving reads of a framework: its name, capabilities and mapping table (class attributes will do)."""

    @property
    def name(self) -> str: ...

    @property
    def capabilities(self) -> Capabilities: ...

    @property
    def mapping(self) -> tuple[Mapping, ...]: ...


Candidate = tuple[Any, str]
"""A value ``auto`` may take and why it would."""


def resolve(recipe: Recipe, framework: Backend) -> Resolution:
    """The recipe as ``framework`` will run it: each ``auto`` field resolved, in the order later ones may depend on."""
    values: list[AutoValue] = []
    for dotted, candidates in _PREFERENCES:
        if value_at(recipe, dotted) != AUTO:
            continue
        value, why = _first_accepted(recipe, framework, dotted, candidates(recipe, framework))
        recipe = _with(recipe, dotted, value)
        values.append(AutoValue(dotted, value, why))
    counted = epoch_steps(recipe)
    if counted is not None and counted.steps >= 1:  # algorithm.epochs over rows counted here: the run's steps
        recipe = _with(recipe, "algorithm.steps", counted.steps)
        epochs = int(recipe.algorithm.epochs or 0)
        values.append(AutoValue("algorithm.steps", counted.steps,
                                counted.arithmetic(epochs, recipe.algorithm.prompts_per_step),
                                source=f"algorithm.epochs={epochs}"))
    return Resolution(recipe, tuple(values))


# --- the preference lists, first choice first ---------------------------------------------------------------------


def _gpus(recipe: Recipe, framework: Backend) -> list[Candidate]:
    caps = framework.capabilities
    scheduler = recipe.scheduler.get("name")
    if scheduler not in LOCAL_SCHEDULERS:
        if caps.needs_gpu:
            return [(1, f"assumed: the plan cannot see the nodes {scheduler} will give the run; set "
                        "resources.gpus_per_node to the GPUs each node has")]
        return [(0, f"{framework.name} asks {scheduler} for no GPU unless resources.gpus_per_node is set")]
    if recipe.resources.device == "cpu":
        if caps.needs_gpu and caps.cpu_mode:
            return [(0, f"resources.device=cpu: {caps.cpu_mode}")]
        if caps.needs_gpu:  # refused by resources.device already; say what was assumed
            return [(1, "assumed: resources.device=cpu, but the backend trains on GPUs only")]
        return [(0, "resources.device=cpu")]
    found, how = count_gpus()
    if caps.needs_gpu:
        if found:
            return [(found, f"the GPUs found on this machine ({how})")]
        return [(1, f"assumed: no GPU found on this machine ({how}); a run here stops before writing anything")]
    if found:
        return [(1, f"one of the {found} GPU(s) found on this machine ({how}); set resources.gpus_per_node={found} "
                    "to train on all of them with torchrun")]
    if recipe.resources.device == "cuda":
        return [(1, "resources.device=cuda")]
    return [(0, f"no GPU found on this machine ({how}): training runs on the CPU")]


def _engine(recipe: Recipe, framework: Backend) -> list[Candidate]:
    engines = framework.capabilities.rollout_engines
    if not engines:
        return []
    if framework.capabilities.launcher == "in_process" and recipe.gpus_per_node > 0 \
            and not recipe.framework.get("python"):
        # In unirl's own interpreter a serving engine is used where it is installed: on a GPU it generates many
        # times faster than transformers' generate (TRL's vLLM colocate mode)
        for engine in engines:
            if engine != "hf" and importlib.util.find_spec(engine) is not None:
                return [(engine, f"installed here and the run has GPUs ({framework.name}'s {engine} mode)")]
        return [(engines[0], f"{framework.name}'s own rollout engine (install vllm for its faster GPU rollouts)")]
    return [(engines[0], f"{framework.name}'s own rollout engine")]


def _chat_template(recipe: Recipe, framework: Backend) -> list[Candidate]:
    if recipe.model.path.startswith(BUILTIN_PREFIX):
        return [(False, "a builtin model is trained from scratch on the raw prompt text"),
                (True, "")]
    return [(True, "hub and local models are instruct models trained on their chat template; the frameworks' "
                   "official examples render prompts with it"),
            (False, "")]


def _before_training(recipe: Recipe, framework: Backend) -> list[Candidate]:
    return [(True, "the baseline: held-out accuracy before the first update"), (False, "")]


def _greedy(recipe: Recipe, framework: Backend) -> list[Candidate]:
    return [(True, "held-out accuracy of the most likely completion"), (False, "")]


def _no_evaluations(recipe: Recipe) -> list[Candidate]:
    """Nothing to stop at: no held-out data, or no evaluation during training."""
    return [] if recipe.data.eval and recipe.eval.every_steps else [(None, "no held-out evaluation during training")]


def _stop_after_plateau(recipe: Recipe, framework: Backend) -> list[Candidate]:
    if none := _no_evaluations(recipe):
        return none
    return [(6, "stop once held-out accuracy has not risen for 6 evaluations in a row"),
            (None, "")]  # the backends without early stop refuse any value


def _stop_at_accuracy(recipe: Recipe, framework: Backend) -> list[Candidate]:
    if none := _no_evaluations(recipe):
        return none
    return [(1.0, "stop once every held-out prompt is solved: accuracy cannot rise further"), (None, "")]


def _keep_best(recipe: Recipe, framework: Backend) -> list[Candidate]:
    if none := _no_evaluations(recipe):
        return [(False, none[0][1])]
    return [(True, "end with the best held-out evaluation's weights, measured again"), (False, "")]


def _overlong_buffer(recipe: Recipe, framework: Backend) -> list[Candidate]:
    buffer = recipe.algorithm.max_new_tokens // 5
    if buffer < 1:
        return [(None, f"max_new_tokens={recipe.algorithm.max_new_tokens} leaves no room for DAPO's buffer (a fifth)")]
    # no fallback to null: a backend that cannot shape overlong completions refuses DAPO as it stands
    return [(buffer, "a fifth of max_new_tokens, as DAPO's 4096 of 20480 tokens")]


_PREFERENCES: tuple[tuple[str, Callable[[Recipe, Backend], list[Candidate]]], ...] = (
    ("resources.gpus_per_node", _gpus),
    ("rollout.engine", _engine),
    ("data.chat_template", _chat_template),
    ("eval.before_training", _before_training),
    ("eval.greedy", _greedy),
    ("eval.stop_after_plateau", _stop_after_plateau),  # issue 14: TRL alone stops early
    ("eval.stop_at_accuracy", _stop_at_accuracy),
    ("eval.keep_best", _keep_best),
    ("algorithm.overlong_buffer", _overlong_buffer),
)


def _first_accepted(recipe: Recipe, framework: Backend, dotted: str, candidates: list[Candidate]) -> Candidate:
    """The first candidate no row of the backend's mapping table refuses; a later candidate's reason is the refusal
    of the ones before it. When every one is refused, the first (the plan then refuses it, naming the field)."""
    rows = [m for m in framework.mapping if m.recipe_field == dotted]
    refusals: list[str] = []
    for value, why in candidates:
        trial = _with(recipe, dotted, value)
        refused = next((text for m in rows if (text := m.refusal(trial)) is not None), None)
        if refused is None:
            return value, (why or f"{framework.name} supports {refusals[0]}")
        refusals.append(refused)
    return candidates[0] if candidates else (AUTO, "no value to resolve to")


def _with(recipe: Recipe, dotted: str, value: Any) -> Recipe:
    group, _, name = dotted.partition(".")
    return replace(recipe, **{group: replace(getattr(recipe, group), **{name: value})})
