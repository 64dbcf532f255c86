"""Registers the built-in rewards, lazily: their modules load only when a recipe uses them."""

from __future__ import annotations

from typing import Any

from unirl.hookspecs import hookimpl
from unirl.host.registry import Registry


@hookimpl
def unirl_add_rewards(registry: Registry[Any]) -> None:
    registry.add("unirl.plugins.builtin_rewards.math_answer:math_answer", name="math_answer")
    registry.add("unirl.plugins.builtin_rewards.math_answer:numeric_closeness", name="numeric_closeness")
    registry.add("unirl.plugins.builtin_rewards.formats:bare_number", name="bare_number")
    registry.add("unirl.plugins.builtin_rewards.formats:format_match", name="format")
    registry.add("unirl.plugins.builtin_rewards.formats:length_penalty", name="length_penalty")
    registry.add("unirl.plugins.builtin_rewards.code_exec:code_tests", name="code_tests")
