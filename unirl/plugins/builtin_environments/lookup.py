"""``lookup``: a task only a tool call solves. Each episode hides a fresh value (0-9) under every key (0-9); the
prompt ``k?`` asks for key k's value, which nothing in the prompt or in training reveals: answering without
looking it up is right one time in ten.

Actions, in the builtin tiny model's alphabet (digits and ``+-*=? ``): a turn that starts ``=k`` looks key k up and
the environment answers ``*v`` (a model with a chat template may instead call the ``get`` tool, Hermes style); with
``keyed=false`` a turn that starts ``=`` looks up the key asked for, so the tool takes no argument. A turn that
starts with a digit answers with it and ends the episode. Turn rewards: 0.1 for the first lookup, 0.1 more when it
is the key asked for (always, unkeyed), 1 for the right answer; so a return of 1 or more means solved, and looking up
again earns nothing. ``tool=false`` (the control) answers every lookup with ``?``: the same task without the tool,
which no policy can solve above chance.
"""

from __future__ import annotations

import random
import re

from unirl.environments.contract import Environment, Step, Task, environment, spec_of, tool

CALL = re.compile(r"=(\d)")
UNKEYED_CALL = re.compile(r"=()")
CALL_REWARD = 0.1
KEY_REWARD = 0.1
ANSWER_REWARD = 1.0


@environment("lookup", metrics=("called", "key_ok", "correct"))
class Lookup(Environment):
    """Answer with the value hidden under the prompt's key; only a lookup reveals it."""

    max_turns = 2

    def __init__(self, tool: bool = True, keyed: bool = True) -> None:
        super().__init__(tool=tool, keyed=keyed)
        self.tool_on = bool(tool)
        self.keyed = bool(keyed)

    def reset(self, task: Task) -> str:
        prompt = task.prompt if isinstance(task.prompt, str) else str(task.prompt[-1].get("content", ""))
        if not prompt[:1].isdigit():
            raise ValueError(f"lookup prompts are 'k?' with a digit k, not {prompt!r}")
        self.key = prompt[0]
        rng = random.Random(task.seed)
        self.table = {str(k): str(rng.randrange(10)) for k in range(10)}
        self.looked_up = False
        return prompt

    def step(self, action: str) -> Step:
        text = action.strip()
        if "<tool_call>" in text:
            answer = super().step(text)
            return Step(observation=answer.observation, done=answer.done, metrics={**answer.metrics, "called": 1.0})
        call = (CALL if self.keyed else UNKEYED_CALL).match(text)
        if call is not None:
            key = call.group(1) or self.key
            asked = key == self.key
            reward = 0.0 if self.looked_up else CALL_REWARD + (KEY_REWARD if asked else 0.0)
            self.looked_up = True
            return Step(observation=f"*{self.get(key)}", reward=reward,
                        metrics={"called": 1.0, "key_ok": float(asked)})
        correct = text[:1] == self.table[self.key]
        return Step(reward=ANSWER_REWARD if correct else 0.0, done=True, metrics={"correct": float(correct)})

    @tool
    def get(self, key: str) -> str:
        """Return the value stored under key."""
        return self.table.get(key, "?") if self.tool_on else "?"


LOOKUP = spec_of(Lookup)
