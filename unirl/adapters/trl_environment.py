"""Episodes of a unirl environment as TRL's ``rollout_func`` (GRPOTrainer, TRL 1.16 grpo_trainer.py:2200-2272).

TRL hands the function the batch's prompts, each already repeated once per sample of its group, and takes back per
episode the prompt's token ids, the completion's (every assistant turn and every observation between them, in
order) and ``env_mask`` (1 under a token the model generated, 0 under an observation's: no loss). Every other key
reaches the reward functions per completion (L2741-2748): ``env_return`` (None for a failed episode) and
``env_episode`` (the whole episode, for trajectories.jsonl).

Token in, token out, observations through the chat template, and ``algorithm.max_new_tokens`` as the whole
episode's budget, as every rollout engine does (:mod:`unirl.environments.tokens`, whose async loop drives one episode
per engine call); here the episodes still running generate together, one batched ``generate`` per turn, since
transformers generates on the trainer's own process.
"""

from __future__ import annotations

import hashlib
from collections.abc import Mapping, Sequence
from typing import Any

from unirl.adapters.trl_rows import row_of
from unirl.environments.contract import EnvironmentSpec, Task
from unirl.environments.episode import EpisodeRunner
from unirl.environments.tokens import ChatRendering, EpisodeTokens, add_observation, cut_turn, episode_record
from unirl.errors import UnirlError


def episode_seed(run_seed: int, batch: int, index: int) -> int:
    """A seed of its own for every episode of a run (the samples of one prompt included), the same on a rerun."""
    digest = hashlib.sha256(f"{run_seed}:{batch}:{index}".encode()).digest()
    return int.from_bytes(digest[:4], "big")


class TrlEpisodes:
    """Runs batches of episodes of one environment with a transformers model (generation batched across the
    episodes still running, turn by turn)."""

    def __init__(self, spec: EnvironmentSpec, kwargs: Mapping[str, Any], *, tok: Any, rows: Sequence[Mapping[str, Any]],
                 chat_template: bool, max_new_tokens: int, temperature: float, top_p: float, timeout_s: float,
                 max_turns: int | None, run_seed: int, eos_ids: set[int], suppress: list[int] | None) -> None:
        self.spec = spec
        self.kwargs = dict(kwargs)
        self.tok = tok
        self.rows = rows
        """The training rows, by the index each prompt TRL hands over carries (:mod:`unirl.adapters.trl_rows`)."""
        self.rendering = ChatRendering(tok, chat_template=chat_template)
        self.max_new_tokens = max_new_tokens
        self.temperature = temperature
        self.top_p = top_p
        self.timeout_s = timeout_s
        self.max_turns = max_turns
        self.run_seed = run_seed
        self.eos_ids = eos_ids
        self.suppress = suppress
        self.batches = 0

    @staticmethod
    def task_for(row: Mapping[str, Any], seed: int) -> Task:
        prompt = row["prompt"]
        return Task(prompt=str(prompt) if isinstance(prompt, str) else tuple(dict(m) for m in prompt),
                    reference=row.get("reference"), metadata=dict(row.get("metadata") or {}), seed=seed)

    # --- the loop --------------------------------------------------------------------------------------------------

    def run(self, model: Any, rows: Sequence[Mapping[str, Any]], seeds: list[int], *,
            greedy: bool) -> list[EpisodeTokens]:
        """One episode per row (its prompt, reference and metadata are the episode's task), with its seed."""
        import torch

        runners = [EpisodeRunner(self.spec, self.kwargs, self.task_for(r, s), timeout_s=self.timeout_s,
                                 max_turns=self.max_turns) for r, s in zip(rows, seeds, strict=True)]
        out: list[EpisodeTokens] = []
        active: list[int] = []
        for i, runner in enumerate(runners):
            opening = runner.start()
            out.append(EpisodeTokens(self.rendering.prompt_ids(opening if opening is not None
                                                              else [{"role": "user", "content": ""}])))
            if opening is not None:
                active.append(i)
        context = int(getattr(model.config, "max_position_embeddings", 0) or 0) or None
        stop = sorted(self.eos_ids)
        was_training = model.training
        model.eval()
        try:
            while active:
                left = [self.max_new_tokens - len(out[i].completion_ids) for i in active]
                sequences = [out[i].prompt_ids + out[i].completion_ids for i in active]
                width = max(map(len, sequences))
                pad = self.tok.pad_token_id
                ids = torch.tensor([[pad] * (width - len(s)) + s for s in sequences], device=model.device)
                mask = torch.tensor([[0] * (width - len(s)) + [1] * len(s) for s in sequences], device=model.device)
                with torch.no_grad():
                    generated = model.generate(
                        input_ids=ids, attention_mask=mask, max_new_tokens=max(left), do_sample=not greedy,
                        temperature=None if greedy else self.temperature, top_p=None if greedy else self.top_p,
                        top_k=None, suppress_tokens=self.suppress, pad_token_id=pad, eos_token_id=stop)
                still: list[int] = []
                for i, budget, new in zip(active, left, generated[:, width:].tolist(), strict=True):
                    # a batch generates to the longest budget left; each keeps its own
                    turn, truncated = cut_turn(new, budget, self.eos_ids)
                    item = out[i]
                    item.completion_ids += turn
                    item.env_mask += [1] * len(turn)
                    answer = runners[i].act(self.rendering.action_text(turn, truncated), truncated=truncated)
                    if answer is None or add_observation(item, runners[i], self.rendering, answer,
                                                         budget=self.max_new_tokens, context=context) is None:
                        continue
                    still.append(i)
                active = still
        finally:
            model.train(was_training)
        for item, runner in zip(out, runners, strict=True):
            item.episode = runner.finish()
            if not item.completion_ids:  # an episode that failed before its first turn: nothing to train on
                item.completion_ids, item.env_mask = [stop[0]], [0]
        return out

    def rollout_func(self, prompts: list[Any], trainer: Any) -> dict[str, Any]:
        """TRL's ``rollout_func(prompts, trainer)``: one episode per prompt (prompts come repeated per sample), on the
        row each prompt carries."""
        model = trainer.accelerator.unwrap_model(trainer.model)
        self.batches += 1
        seeds = [episode_seed(self.run_seed, self.batches, i) for i in range(len(prompts))]
        rows = []
        for prompt in prompts:
            index = row_of(prompt)
            if index is None:
                raise UnirlError("TRL handed the episode loop a prompt without its data row: the train dataset must "
                                 "come from unirl.adapters.trl_rows.rows_dataset")
            rows.append(self.rows[index])
        items = self.run(model, rows, seeds, greedy=False)
        episodes = [item.episode for item in items]
        return {"prompt_ids": [item.prompt_ids for item in items],
                "completion_ids": [item.completion_ids for item in items],
                "logprobs": None,  # read only by vLLM's importance-sampling correction, which this loop does not use
                "env_mask": [item.env_mask for item in items],
                "env_return": [None if e is None or e.failed else e.return_ for e in episodes],
                "env_episode": [episode_record(item) for item in items]}
