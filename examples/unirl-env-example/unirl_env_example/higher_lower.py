"""``higher_lower``: find a hidden digit in a few guesses, told after each wrong guess whether it is higher (``+``) or
lower (``-``). A multi-turn task without a tool: what the model learns is to use the feedback of earlier turns.

Every episode hides a fresh digit (from the task's seed), so a first guess is right one time in ten; bisecting
finds any digit within four guesses. The actions fit the builtin tiny model's alphabet (digits and ``+-*=? ``).
"""

from __future__ import annotations

import random

import unirl


@unirl.environment("higher_lower", metrics=("guesses", "solved", "invalid"))
class HigherLower(unirl.Environment):
    """Find the hidden digit; each wrong guess is answered + (higher) or - (lower)."""

    max_turns = 4

    def __init__(self, step_cost: float = 0.1) -> None:
        super().__init__(step_cost=step_cost)
        self.step_cost = float(step_cost)

    def reset(self, task: unirl.Task) -> str:
        self.secret = random.Random(task.seed).randrange(10)
        return "?"

    def step(self, action: str) -> unirl.Step:
        guess = action.strip()[:1]
        if not guess.isdigit():  # not a guess: the episode ends unsolved
            return unirl.Step(done=True, metrics={"guesses": 1.0, "solved": 0.0, "invalid": 1.0})
        if int(guess) == self.secret:
            return unirl.Step(reward=1.0, done=True, metrics={"guesses": 1.0, "solved": 1.0, "invalid": 0.0})
        hint = "+" if self.secret > int(guess) else "-"
        return unirl.Step(observation=hint, reward=-self.step_cost,
                          metrics={"guesses": 1.0, "solved": 0.0, "invalid": 0.0})
