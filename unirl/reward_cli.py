"""``unirl reward test NAME [NAME ...] --samples FILE.jsonl [--json]``: score samples before a GPU hour is spent.

Each line of the samples file is one object with ``completion`` (required) and optionally ``prompt``,
``reference``, ``data_source``, ``metadata``, ``prompt_messages``, ``truncated``, ``completion_tokens``.
Rewards run through the same executor the backends use (worker processes, per-call timeout), so a
failure or a hang shows here exactly as it would be counted and logged in a run. The exit code is 1 when
any reward call failed, so the command can guard a CI job.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from unirl.errors import FieldError, UnirlError
from unirl.reward_executor import RewardExecutor
from unirl.reward_spec import RewardPolicy, RewardRuntimeSpec, entry_for
from unirl.rewards import Sample

SAMPLE_FIELDS = ("prompt", "completion", "reference", "data_source", "metadata", "prompt_messages", "truncated",
                 "completion_tokens")


def read_samples(path: Path) -> list[Sample]:
    if not path.is_file():
        raise FieldError("--samples", str(path), "no such file")
    samples = []
    for lineno, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise FieldError("--samples", f"{path}:{lineno}", f"not JSON ({exc.msg})") from exc
        if not isinstance(row, dict) or "completion" not in row:
            raise FieldError("--samples", f"{path}:{lineno}", "each line must be an object with a 'completion'")
        unknown = set(row) - set(SAMPLE_FIELDS)
        if unknown:
            raise FieldError("--samples", f"{path}:{lineno}", f"unknown fields {sorted(unknown)}; allowed: "
                             f"{list(SAMPLE_FIELDS)}")
        samples.append(Sample.from_dict(row))
    return samples


def main(argv: list[str], host: Any) -> int:
    parser = argparse.ArgumentParser(prog="unirl reward test", description=__doc__.split("\n")[0])
    parser.add_argument("names", nargs="+", help="registered rewards (see `unirl rewards`)")
    parser.add_argument("--samples", required=True, type=Path, help="JSONL file of samples")
    parser.add_argument("--kwargs", default="{}", help='JSON object of keyword arguments per reward, e.g. '
                        '\'{"numeric_closeness": {"scale": 5}}\'')
    parser.add_argument("--json", action="store_true", help="one JSON object per sample on stdout")
    parser.add_argument("--timeout", type=float, default=RewardPolicy.timeout_s, help="seconds per reward call")
    parser.add_argument("--workers", type=int, default=RewardPolicy.workers,
                        help="worker processes (0: score in this process, no timeout)")
    ns = parser.parse_args(argv)
    try:
        kwargs = json.loads(ns.kwargs)
    except json.JSONDecodeError as exc:
        raise FieldError("--kwargs", ns.kwargs, f"must be a JSON object ({exc.msg})") from exc
    if not isinstance(kwargs, dict) or set(kwargs) - set(ns.names):
        raise FieldError("--kwargs", ns.kwargs, f"must map reward names among {ns.names} to objects")
    spec = RewardRuntimeSpec(tuple(entry_for(host.rewards.get(n), 1.0, kwargs.get(n)) for n in ns.names),
                             RewardPolicy(timeout_s=ns.timeout, workers=ns.workers))
    spec.check()
    samples = read_samples(ns.samples)
    if not samples:
        raise UnirlError(f"--samples {ns.samples}: no samples in the file")
    with RewardExecutor(spec) as executor:
        scored_all = executor.score(samples)
    rows = []
    for i, (sample, scored) in enumerate(zip(samples, scored_all, strict=True)):
        rows.append({"index": i, "completion": sample.completion, "reference": sample.reference, "total": scored.total,
                     "scores": scored.scores, "components": scored.components, "errors": scored.errors,
                     "info": scored.info})
    if ns.json:
        for row in rows:
            print(json.dumps(row, ensure_ascii=False))
    else:
        _print_table(rows, ns.names)
    return 1 if any(r["errors"] for r in rows) else 0


def _print_table(rows: list[dict[str, Any]], names: list[str]) -> None:
    from rich.table import Table

    from unirl.report import console

    components = sorted({c for r in rows for c in r["components"]})
    table = Table("#", "completion", "reference", *names, *components, "error")
    for r in rows:
        shown = r["completion"] if len(r["completion"]) <= 40 else r["completion"][:37] + "..."
        table.add_row(str(r["index"]), repr(shown), str(r["reference"]),
                      *[_num(r["scores"][n]) for n in names], *[_num(r["components"].get(c)) for c in components],
                      "; ".join(f"{k}: {v.splitlines()[-1]}" for k, v in r["errors"].items()))
    out = console()
    out.print(table)
    for name in names:
        values = [r["scores"][name] for r in rows if r["scores"][name] is not None]
        failed = sum(1 for r in rows if name in r["errors"])
        mean = f"{sum(values) / len(values):.3f}" if values else "n/a"
        out.print(f"{name}: mean {mean} over {len(values)} samples, {failed} failed")


def _num(value: float | None) -> str:
    return "FAILED" if value is None else f"{value:.3f}"
