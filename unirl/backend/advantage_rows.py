"""The mapping rows of the advantage estimator: each backend names one estimator for a pair of recipe fields
(``algorithm.advantage_baseline`` x ``algorithm.advantage_norm``), so a refusal must say which of the two is off: the
baseline when no pair has it, else the normalisation that does not go with it. Also what the critic rows of the
backends with PPO read."""

from __future__ import annotations

from collections.abc import Callable, Collection
from typing import Any

from unirl.backend.contract import OMIT, Mapping, NativeView
from unirl.backend.native import model_location
from unirl.recipe.schema import Recipe


def pair(r: Recipe) -> tuple[str, str]:
    return r.algorithm.advantage_baseline, r.algorithm.advantage_norm


def uses_critic(r: Recipe) -> bool:
    """PPO's advantages: a learned value function (``algorithm.critic``), which every critic row reads."""
    return r.algorithm.advantage_baseline == "critic"


def critic_model(r: Recipe) -> str:
    """The critic's initial weights: ``algorithm.critic.model``, else the policy's (as the actor's row sends it)."""
    return r.algorithm.critic.model or model_location(r)


def advantage_rows(pairs: Collection[tuple[str, str]], native_key: str, convert: Callable[[Recipe], Any], note: str,
                   why_not: str, native_default: Any,
                   inverse: Callable[[Any, NativeView], dict[str, Any]] | None = None) -> tuple[Mapping, Mapping]:
    """The estimator row (on ``advantage_baseline``, sending ``convert``) and the pairing row (on
    ``advantage_norm``, sending nothing). ``why_not`` says what the backend lacks, after the list of pairs."""
    baselines = {baseline for baseline, _ in pairs}
    allowed = ", ".join(f"{b}+{n}" for b, n in pairs)
    estimator = Mapping(
        "algorithm.advantage_baseline", native_key, lambda r: convert(r) if pair(r) in pairs else OMIT, note,
        supported=lambda r: r.algorithm.advantage_baseline in baselines,
        supported_text=f"{', '.join(sorted(baselines))} (advantage_baseline x advantage_norm: {allowed}); {why_not}",
        native_default=native_default, inverse=inverse)
    pairing = Mapping(
        "algorithm.advantage_norm", "(goes with advantage_baseline)", lambda r: r.algorithm.advantage_norm,
        supported=lambda r: r.algorithm.advantage_baseline not in baselines or pair(r) in pairs,
        supported_text=f"advantage_baseline x advantage_norm one of {allowed}; {why_not}")
    return estimator, pairing
