"""``unirl env test NAME --tasks T.jsonl (--actions A.jsonl | --policy random) [--file E.py] [--kwargs JSON]
[--json]``: replay scripted assistant turns (or turns a random builtin model samples) through an environment before
any training.

Line i of the tasks file is task i: ``prompt`` (text or chat messages, required), and optionally ``reference`` (or
``answer``, as data files name it), ``metadata`` and ``seed`` (the episode's seed; default i). Line i of the
actions file holds the assistant's turns for task i: ``{"turns": ["...", "..."]}``. Each episode runs through the
same loop a rollout engine drives (a fresh instance, a deadline on every call, ``close()`` always), and prints its
observations, tool calls and results, per-turn rewards, termination, return, metrics and errors. The exit code is 1
when any episode failed.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from unirl.environments.contract import Task
from unirl.environments.episode import Episode, play
from unirl.errors import FieldError, UnirlError
from unirl.jsonl import JsonlError, objects

TASK_FIELDS = ("prompt", "reference", "answer", "metadata", "seed")
DEFAULT_TIMEOUT_S = 30.0
POLICIES = ("scripted", "random")
RANDOM_POLICY_MODEL = "tiny-arith"  # the builtin model the embedded recipes train; its weights random from --seed


def read_lines(path: Path, flag: str, what: str) -> list[tuple[str, dict[str, Any]]]:
    if not path.is_file():
        raise FieldError(flag, str(path), "no such file")
    try:
        return [(f"{path}:{lineno}", row) for lineno, row in objects(path)]
    except JsonlError as exc:
        raise FieldError(flag, f"{exc.path}:{exc.lineno}" if exc.lineno else str(exc.path),
                         f"a JSON-lines file of {what} objects; {exc.reason}") from None


def task_from_row(row: dict[str, Any], where: str, index: int) -> Task:
    unknown = set(row) - set(TASK_FIELDS)
    if unknown:
        raise FieldError("--tasks", where, f"unknown fields {sorted(unknown)}; allowed: {list(TASK_FIELDS)}")
    prompt = row.get("prompt")
    if not (isinstance(prompt, str) or (isinstance(prompt, list) and prompt
                                        and all(isinstance(m, dict) and isinstance(m.get("content"), str)
                                                for m in prompt))):
        raise FieldError("--tasks", f"{where} prompt", "text, or a non-empty list of {'role', 'content'} messages")
    if "reference" in row and "answer" in row:
        raise FieldError("--tasks", f"{where}", "one of 'reference' and 'answer' (the same field: 'answer' is what "
                                                 "data files call it, data.answer_key's default)")
    reference = row.get("reference", row.get("answer"))
    metadata = row.get("metadata") or {}
    seed = row.get("seed", index)
    if not isinstance(metadata, dict):
        raise FieldError("--tasks", f"{where} metadata", "an object")
    if isinstance(seed, bool) or not isinstance(seed, int):
        raise FieldError("--tasks", f"{where} seed={seed!r}", "an integer")
    return Task(prompt if isinstance(prompt, str) else tuple(dict(m) for m in prompt),
                None if reference is None else str(reference), dict(metadata), seed)


def turns_from_row(row: dict[str, Any], where: str) -> list[str]:
    turns = row.get("turns")
    if set(row) != {"turns"} or not isinstance(turns, list) or not all(isinstance(t, str) for t in turns):
        raise FieldError("--actions", where, 'each line is {"turns": ["assistant text", ...]}')
    return list(turns)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="unirl env test", description=__doc__.split("\n")[0])
    p.add_argument("name", help="the environment (see `unirl environments`, or defined in --file)")
    p.add_argument("--tasks", required=True, type=Path, help="JSONL file of tasks")
    p.add_argument("--actions", type=Path, help="JSONL file of scripted assistant turns per task (--policy scripted)")
    p.add_argument("--policy", choices=POLICIES, default="scripted",
                   help="scripted: the turns in --actions; random: turns sampled from the builtin tiny model (random "
                        "weights from --seed) through the episode loop TRL trains with")
    p.add_argument("--seed", type=int, default=0, help="--policy random: the model's weights and its sampling")
    p.add_argument("--max-new-tokens", type=int, default=16,
                   help="--policy random: each episode's token budget, turns and observations together")
    p.add_argument("--file", action="append", default=[], type=Path, metavar="ENV.py",
                   help="a Python file defining environments with @unirl.environment (repeatable)")
    p.add_argument("--kwargs", default="{}", help="JSON object: the environment's keyword arguments")
    p.add_argument("--timeout", type=float, default=DEFAULT_TIMEOUT_S, help="seconds per environment call")
    p.add_argument("--json", action="store_true", help="one JSON object per episode on stdout")
    return p


def cmd_env(args: list[str]) -> int:
    """``unirl env SUBCOMMAND``: ``test`` is the only one."""
    from unirl.cli.args import test_subcommand
    from unirl.host.manager import get_host

    rest = test_subcommand("env", args, "Work with multi-turn environments before training.",
                           "replay scripted turns through an environment")
    return main(rest, get_host())


def main(argv: list[str], host: Any) -> int:
    import math

    from unirl.cli.args import json_object_flag, results_stdout

    ns = parser().parse_args(argv)
    kwargs = json_object_flag("--kwargs", ns.kwargs, "a JSON object of the environment's keyword arguments")
    if not (math.isfinite(ns.timeout) and ns.timeout > 0):
        raise FieldError("--timeout", ns.timeout, "a number of seconds > 0")
    if ns.policy == "scripted" and ns.actions is None:
        raise FieldError("--actions", None, "a JSONL file of scripted turns, or --policy random")
    if ns.policy == "random" and ns.actions is not None:
        raise FieldError("--actions", str(ns.actions), "none with --policy random (its turns are sampled)")
    if ns.max_new_tokens < 1:
        raise FieldError("--max-new-tokens", ns.max_new_tokens, "a whole number >= 1")
    # From the first file's import on, what the environment's code prints goes to stderr: --json stays parseable.
    with results_stdout() as results:
        if ns.file:
            from unirl.rewards.spec import RewardPolicy, load_reward_file, probe_reward_file

            for path in ns.file:  # a plugin file like a recipe's reward file: its decorated environments register
                probe_reward_file(str(path), "--file", DEFAULT_TIMEOUT_S, RewardPolicy.worker_memory_mb)
                host.add_plugin_file(load_reward_file(path), path)
        spec = host.environments.get(ns.name)
        tasks = [task_from_row(row, where, i)
                 for i, (where, row) in enumerate(read_lines(ns.tasks, "--tasks", "task"))]
        if not tasks:
            raise UnirlError(f"--tasks {ns.tasks}: no tasks in the file")
        if ns.policy == "random":
            episodes = sampled_episodes(spec, kwargs, tasks, seed=ns.seed, max_new_tokens=ns.max_new_tokens,
                                        timeout_s=ns.timeout)
        else:
            actions = [turns_from_row(row, where) for where, row in read_lines(ns.actions, "--actions", "turns")]
            if len(actions) != len(tasks):
                raise FieldError("--actions", str(ns.actions),
                                 f"one line per task: {len(tasks)} tasks, {len(actions)} lines")
            episodes = [play(spec, kwargs, task, turns, timeout_s=ns.timeout)
                        for task, turns in zip(tasks, actions, strict=True)]
        if ns.json:
            for i, episode in enumerate(episodes):
                results.write(json.dumps({"index": i, **episode.to_dict()}, ensure_ascii=False, default=repr) + "\n")
            results.flush()
        else:
            print_episodes(episodes, results)
    return 1 if any(e.failed for e in episodes) else 0


def sampled_episodes(spec: Any, kwargs: dict[str, Any], tasks: list[Task], *, seed: int, max_new_tokens: int,
                     timeout_s: float) -> list[Episode]:
    """Each task's episode with turns sampled from the builtin tiny model (random weights), through the TRL episode
    loop (batched per turn, token in and out, the episode's budget), so an environment meets a model's untidy
    output before a training run does."""
    try:
        import torch

        from unirl.adapters.trl_environment import TrlEpisodes
        from unirl.data.builtin import tiny_model
    except ImportError as exc:
        raise UnirlError(f"--policy random needs torch and transformers ({exc}): pip install -e '.[trl]'") from exc
    model, tok = tiny_model.build(RANDOM_POLICY_MODEL, seed)
    rows = [{"prompt": t.prompt if isinstance(t.prompt, str) else [dict(m) for m in t.prompt],
             "reference": t.reference, "metadata": dict(t.metadata)} for t in tasks]
    loop = TrlEpisodes(spec, kwargs, tok=tok, rows=rows, chat_template=False, max_new_tokens=max_new_tokens,
                       temperature=1.0, top_p=1.0, timeout_s=timeout_s, max_turns=None, run_seed=seed,
                       eos_ids={int(tok.eos_token_id)}, suppress=None)
    torch.manual_seed(seed)
    items = loop.run(model, rows, [t.seed for t in tasks], greedy=False)
    return [item.episode for item in items if item.episode is not None]


SHOWN_CHARS = 2000  # of one action or message on the terminal; --json carries every character


def shown(text: str) -> str:
    return text if len(text) <= SHOWN_CHARS else f"{text[:SHOWN_CHARS]}... ({len(text):,} characters in all)"


def print_episodes(episodes: list[Episode], stream: Any) -> None:
    from rich.text import Text

    from unirl.console import console

    out = console(file=stream)
    for i, episode in enumerate(episodes):
        out.print(Text(f"episode {i} (seed {episode.task['seed']}): {episode.termination}, return "
                       f"{episode.return_:.3f} = turns {episode.turn_rewards:.3f} + final {episode.final_reward:.3f}",
                       style="bold"))
        for message in episode.opening:
            out.print(Text(f"  [{message.get('role', '?')}] {shown(message.get('content', ''))}"))
        for n, turn in enumerate(episode.turns, 1):
            cut = "  (truncated)" if turn.truncated else ""
            out.print(Text(f"  turn {n} [assistant] {shown(turn.action)}{cut}"))
            observation = turn.observation
            for message in ([{"role": "user", "content": observation}] if isinstance(observation, str)
                            else observation or []):
                out.print(Text(f"         [{message.get('role', '?')}] {shown(message.get('content', ''))}"))
            metrics = ", ".join(f"{k}={v:g}" for k, v in turn.metrics.items())
            out.print(Text(f"         reward {turn.reward:g}" + (f"; {metrics}" if metrics else "")))
        if episode.error:
            out.print(Text(f"  error ({episode.error_kind}): {episode.error}", style="red"))
        if episode.close_error:
            out.print(Text(f"  close() failed: {episode.close_error}", style="red"))
    failed = sum(e.failed for e in episodes)
    out.print(Text(f"{len(episodes)} episodes, {failed} failed"))
