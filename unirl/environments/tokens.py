"""An episode in tokens: how its messages become token ids, and the async turn loop every rollout engine that owns
its generation calls (verl's agent loop, slime's generate function) drives.

Token in, token out: each turn's tokens are kept as the engine generated them (its end-of-sequence token
included), never decoded and encoded again (the re-tokenization drift of huggingface/trl#5224); an observation is
rendered through the chat template (the text the template adds after an assistant message, with the next turn's
generation prompt: the dummy-conversation diff TRL's tool loop takes, trl/trainer/grpo_trainer.py:1893-1943 @ 1.16)
and tokenized alone, and masked (0) so the model is not trained on it.

The episode's completion budget (``algorithm.max_new_tokens``) covers every turn and every observation between them,
as ``max_completion_length`` does in TRL's own tool loop (grpo_trainer.py:2044-2070): each turn may generate what
is left of it. A turn that ends without an end-of-sequence token, or an observation that leaves no room for another
turn, ends the episode as truncated.
"""

from __future__ import annotations

import asyncio
from collections.abc import Awaitable, Callable
from dataclasses import dataclass, field
from typing import Any

from unirl.environments.contract import Message
from unirl.environments.episode import Episode, EpisodeRunner

DUMMY_TURNS: list[Message] = [{"role": "user", "content": "a"}, {"role": "assistant", "content": "b"}]


class ChatRendering:
    """The episode's messages as text and token ids, through the tokenizer's chat template (or as plain text for a
    tokenizer without one, like the builtin model's)."""

    def __init__(self, tok: Any, *, chat_template: bool | None = None,
                 template_kwargs: dict[str, Any] | None = None) -> None:
        self.tok = tok
        self.chat_template = bool(getattr(tok, "chat_template", None)) if chat_template is None else chat_template
        self.template_kwargs = dict(template_kwargs or {})

    def prompt_text(self, messages: list[Message]) -> str:
        if self.chat_template:
            return str(self.tok.apply_chat_template(messages, tokenize=False, add_generation_prompt=True,
                                                    **self.template_kwargs))
        return "".join(str(m.get("content", "")) for m in messages)

    def prompt_ids(self, messages: list[Message]) -> list[int]:
        # A chat template writes its own special tokens (a BOS among them); plain text gets the tokenizer's.
        return list(self.tok(self.prompt_text(messages), add_special_tokens=not self.chat_template)["input_ids"])

    def observation_text(self, messages: list[Message]) -> str:
        """What an observation adds after an assistant turn (ended by its end-of-sequence token): the template's text
        after the turn, with the next turn's generation prompt; or the messages' text without a template."""
        if not self.chat_template:
            return "".join(str(m.get("content", "")) for m in messages)
        before = str(self.tok.apply_chat_template(DUMMY_TURNS, tokenize=False, **self.template_kwargs))
        after = str(self.tok.apply_chat_template(DUMMY_TURNS + messages, tokenize=False, add_generation_prompt=True,
                                                 **self.template_kwargs))
        return after[len(before):] if after.startswith(before) else after

    def observation_ids(self, messages: list[Message]) -> list[int]:
        return self.text_ids(self.observation_text(messages))

    def text_ids(self, text: str) -> list[int]:
        return list(self.tok(text, add_special_tokens=False)["input_ids"])

    def action_text(self, tokens: list[int], truncated: bool) -> str:
        """What the environment sees of a turn: its text, without the end-of-sequence token that closed it."""
        return str(self.tok.decode(tokens if truncated else tokens[:-1], skip_special_tokens=True))


def eos_ids_of(tok: Any) -> set[int]:
    """The tokenizer's end-of-sequence token ids (one, or a list)."""
    eos = tok.eos_token_id
    return {int(t) for t in (eos if isinstance(eos, list) else [eos]) if t is not None}


def cut_turn(generated: list[int], left: int, eos_ids: set[int]) -> tuple[list[int], bool]:
    """A turn as the episode keeps it: at most ``left`` tokens, up to and including the first end-of-sequence token
    (it stays in the sequence); and whether it was truncated (no end-of-sequence token within them)."""
    tokens = list(generated)[:left]
    end = next((k for k, t in enumerate(tokens) if t in eos_ids), None)
    return (tokens, True) if end is None else (tokens[:end + 1], False)


@dataclass
class EpisodeTokens:
    """One episode as a trainer takes it: the prompt, the completion (turns and observations in order), the mask (1
    under a token the model generated), the log-probabilities the engine reported (0.0 under an observation; None
    when the engine reported none) and the episode itself."""

    prompt_ids: list[int]
    completion_ids: list[int] = field(default_factory=list)
    env_mask: list[int] = field(default_factory=list)
    logprobs: list[float] | None = None
    episode: Episode | None = None


def add_observation(item: EpisodeTokens, runner: EpisodeRunner, rendering: ChatRendering,
                    messages: list[Message], *, budget: int, context: int | None = None) -> str | None:
    """Append an observation's tokens (mask 0, log-probability 0.0) when the episode has budget (``budget``
    completion tokens, ``context`` in all) for another turn after it; else end the episode as truncated there.
    Returns the observation's text, or None when the episode ended."""
    text = rendering.observation_text(messages)
    observed = rendering.text_ids(text)
    used = len(item.prompt_ids) + len(item.completion_ids) + len(observed)
    if len(item.completion_ids) + len(observed) >= budget or (context is not None and used >= context):
        runner.truncate()  # no budget left for another turn: the episode ends here
        return None
    item.completion_ids += observed
    item.env_mask += [0] * len(observed)
    if item.logprobs is not None:
        item.logprobs += [0.0] * len(observed)
    return text


def episode_record(item: EpisodeTokens) -> dict[str, Any] | None:
    """The episode for trajectories.jsonl, with its token masks summarised: tokens the model generated (trained) and
    tokens the environment added (masked)."""
    if item.episode is None:
        return None
    model_tokens = sum(item.env_mask)
    return {**item.episode.to_dict(), "tokens": {"model": model_tokens,
                                                 "environment": len(item.env_mask) - model_tokens}}


@dataclass(frozen=True)
class Generated:
    """One turn as the engine returned it."""

    token_ids: list[int]
    logprobs: list[float] | None = None


Generate = Callable[[list[int], int], Awaitable[Generated]]
"""The engine: ``(context token ids, most tokens to generate) -> the turn``."""


async def drive_episode(runner: EpisodeRunner, rendering: ChatRendering, generate: Generate, *, budget: int,
                        eos_ids: set[int], context: int | None = None,
                        prompt_ids: Callable[[list[Message]], Awaitable[list[int]]] | None = None) -> EpisodeTokens:
    """Run one episode to its end with ``generate`` as the policy; the environment's calls run in a worker thread
    (each under its deadline, :mod:`unirl.environments.episode`), so an engine's event loop never blocks on them.

    ``prompt_ids``: the engine's own rendering of the opening messages (verl's Continuous Token builder), else the
    chat template's. ``context``: the model's context length, which the prompt and completion must fit."""
    opening = await asyncio.to_thread(runner.start)
    messages = opening if opening is not None else [{"role": "user", "content": ""}]
    item = EpisodeTokens(await prompt_ids(messages) if prompt_ids else rendering.prompt_ids(messages), logprobs=[])
    if opening is not None:
        while True:
            left = budget - len(item.completion_ids)
            if left < 1:
                runner.truncate()
                break
            turn = await generate(item.prompt_ids + item.completion_ids, left)
            tokens, truncated = cut_turn(turn.token_ids, left, eos_ids)
            item.completion_ids += tokens
            item.env_mask += [1] * len(tokens)
            if item.logprobs is not None and turn.logprobs is not None and len(turn.logprobs) >= len(tokens):
                item.logprobs += [float(x) for x in turn.logprobs[:len(tokens)]]
            else:
                item.logprobs = None  # the engine reported none (or not for every token): say so, never pad zeros
            answer = await asyncio.to_thread(runner.act, rendering.action_text(tokens, truncated), truncated)
            if answer is None or add_observation(item, runner, rendering, answer, budget=budget,
                                                 context=context) is None:
                break
    item.episode = await asyncio.to_thread(runner.finish)
    return item
