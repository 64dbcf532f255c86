"""``unirl reward test NAME ... --samples FILE.jsonl [--file R.py] [--json]``: score samples before a GPU hour is spent.

Each line of the samples file is one object with ``completion`` (required) and optionally ``prompt``,
``reference``, ``data_source``, ``metadata``, ``prompt_messages``, ``truncated``, ``completion_tokens``.
Rewards run through the same executor the backends use (worker processes, per-call timeout; trusted built-ins in
this process), so a failure or a hang shows here exactly as it would be counted and logged in a run. The exit code
is 1 when any reward call failed, so the command can guard a CI job.
"""

from __future__ import annotations

import argparse
import json
import math
from pathlib import Path
from typing import Any

from unirl.errors import FieldError, UnirlError
from unirl.jsonl import JsonlError, objects
from unirl.rewards.contract import Sample
from unirl.rewards.executor import RewardExecutor
from unirl.rewards.spec import RewardPolicy, RewardRuntimeSpec, entry_for

SAMPLE_FIELDS = ("prompt", "completion", "reference", "data_source", "metadata", "prompt_messages", "truncated",
                 "completion_tokens")


def read_samples(path: Path) -> list[Sample]:
    if not path.is_file():
        raise FieldError("--samples", str(path), "no such file")
    samples = []
    try:
        for lineno, row in objects(path):
            samples.append(sample_from_row(row, f"{path}:{lineno}"))
    except JsonlError as exc:
        raise FieldError("--samples", f"{exc.path}:{exc.lineno}" if exc.lineno else str(exc.path),
                         f"a JSON-lines file of sample objects; {exc.reason}") from None
    return samples


def sample_from_row(row: dict[str, Any], where: str) -> Sample:
    """One line of a samples file as a Sample; a FieldError naming the line and the field otherwise."""
    if "completion" not in row:
        raise FieldError("--samples", where, "each line must be an object with a 'completion'")
    unknown = set(row) - set(SAMPLE_FIELDS)
    if unknown:
        raise FieldError("--samples", where, f"unknown fields {sorted(unknown)}; allowed: {list(SAMPLE_FIELDS)}")
    types = {"completion": str, "prompt": str, "data_source": str, "metadata": dict, "prompt_messages": list,
             "truncated": bool}
    for key, expected in types.items():
        if key in row and row[key] is not None and not isinstance(row[key], expected):
            raise FieldError("--samples", f"{where} {key}={row[key]!r}"[:200], f"{key} must be {expected.__name__}")
    tokens = row.get("completion_tokens")
    if tokens is not None and (isinstance(tokens, bool) or not isinstance(tokens, int) or tokens < 0):
        raise FieldError("--samples", f"{where} completion_tokens={tokens!r}", "a non-negative integer, or null")
    messages = row.get("prompt_messages") or []
    if not all(isinstance(m, dict) for m in messages):
        raise FieldError("--samples", f"{where} prompt_messages", "a list of {'role': ..., 'content': ...} objects")
    return Sample.from_dict(row)


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="unirl reward test", description=__doc__.split("\n")[0])
    p.add_argument("names", nargs="+", help="rewards to run (see `unirl rewards`, or defined in --file)")
    p.add_argument("--samples", required=True, type=Path, help="JSONL file of samples")
    p.add_argument("--file", action="append", default=[], type=Path, metavar="REWARD.py",
                   help="a Python file defining rewards with @unirl.reward (repeatable)")
    p.add_argument("--kwargs", default="{}", help='JSON object of keyword arguments per reward, e.g. '
                   '\'{"numeric_closeness": {"scale": 5}}\'')
    p.add_argument("--json", action="store_true", help="one JSON object per sample on stdout")
    p.add_argument("--timeout", type=float, default=RewardPolicy.timeout_s, help="seconds per reward call")
    p.add_argument("--workers", type=int, default=RewardPolicy.workers, help="reward worker processes")
    p.add_argument("--inline", action="store_true",
                   help="score every reward in this process (no worker processes, no timeout)")
    return p


def cmd_reward(args: list[str]) -> int:
    """``unirl reward SUBCOMMAND``: ``test`` is the only one."""
    from unirl.cli.args import test_subcommand
    from unirl.host.manager import get_host

    rest = test_subcommand("reward", args, "Work with reward functions before training.",
                           "score samples with rewards")
    return main(rest, get_host())


def main(argv: list[str], host: Any) -> int:
    from unirl.cli.args import json_object_flag, results_stdout

    ns = parser().parse_args(argv)
    kwargs = json_object_flag("--kwargs", ns.kwargs, "must be a JSON object")
    if not isinstance(kwargs, dict) or set(kwargs) - set(ns.names) or not all(isinstance(v, dict)
                                                                               for v in kwargs.values()):
        raise FieldError("--kwargs", ns.kwargs, f"must map reward names among {ns.names} to objects")
    policy = RewardPolicy(timeout_s=ns.timeout, workers=ns.workers)
    problems = policy.problems()
    if problems:
        raise FieldError(problems[0].field.replace("reward_policy.", "--"), problems[0].value, problems[0].allowed)
    # From the first file's import on, what user code prints goes to stderr: --json output stays parseable.
    with results_stdout() as results:
        if ns.file:
            from unirl.host.manager import add_decorated
            from unirl.rewards.spec import load_reward_file, probe_reward_file

            for path in ns.file:
                probe_reward_file(str(path), "--file", policy.startup_timeout_s, policy.worker_memory_mb)
                load_reward_file(path)
            add_decorated(host.rewards)
        inline = True if ns.inline else None
        spec = RewardRuntimeSpec(tuple(entry_for(host.rewards.get(n), 1.0, kwargs.get(n), inline) for n in ns.names),
                                 policy)
        spec.check()
        samples = read_samples(ns.samples)  # before any worker starts: a bad file costs nothing
        if not samples:
            raise UnirlError(f"--samples {ns.samples}: no samples in the file")
        with RewardExecutor(spec) as executor:
            scored_all = executor.score(samples)
        rows = []
        for i, (sample, scored) in enumerate(zip(samples, scored_all, strict=True)):
            rows.append({"index": i, "completion": sample.completion, "reference": sample.reference,
                         "total": scored.total, "scores": scored.scores, "components": scored.components,
                         "errors": scored.errors, "error_kinds": scored.error_kinds, "info": scored.info})
        if ns.json:
            for row in rows:
                results.write(json.dumps(_finite(row), ensure_ascii=False, default=repr, allow_nan=False) + "\n")
            results.flush()
        else:
            _print_table(rows, ns.names, results)
    return 1 if any(r["errors"] for r in rows) else 0


def _finite(value: Any) -> Any:
    """Strict JSON for tools like jq: a non-finite number (none should reach here) becomes null, not NaN."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    if isinstance(value, dict):
        return {k: _finite(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_finite(v) for v in value]
    return value


def _print_table(rows: list[dict[str, Any]], names: list[str], stream: Any) -> None:
    from rich.console import Console
    from rich.table import Table
    from rich.text import Text

    # markup=False: completions, references and error messages are user text, never terminal markup.
    out = Console(file=stream, markup=False, highlight=False, emoji=False,
                  width=None if stream.isatty() else 200)
    components = sorted({c for r in rows for c in r["components"]})
    table = Table("#", "completion", "reference", *names, *components, "error")
    for r in rows:
        shown = r["completion"] if len(r["completion"]) <= 40 else r["completion"][:37] + "..."
        errors = "; ".join(f"{k} ({r['error_kinds'].get(k, '?')}): {(v.splitlines() or [''])[-1]}"
                           for k, v in r["errors"].items())
        table.add_row(*(Text(cell) for cell in (
            str(r["index"]), repr(shown), str(r["reference"]), *[_num(r["scores"][n]) for n in names],
            *[_num(r["components"].get(c)) for c in components], errors)))
    out.print(table)
    for name in names:
        values = [r["scores"][name] for r in rows if r["scores"][name] is not None]
        failed = sum(1 for r in rows if name in r["errors"])
        mean = f"{sum(values) / len(values):.3f}" if values else "n/a"
        out.print(Text(f"{name}: mean {mean} over {len(values)} samples, {failed} failed"))


def _num(value: float | None) -> str:
    return "FAILED" if value is None else f"{value:.3f}"
