"""``unirl show RUN_DIR [--step N] [--worst|--best|--errors] [--prompt TEXT] [--limit K] [--json]``: the run's
scored completions in the terminal, grouped by prompt, each with its total, every reward and component, and the
error of a failed reward call.

Completions are model output and reward errors quote them: every string goes through
:func:`unirl.record.report.visible`, so an ANSI escape or a carriage return in a completion prints as ``\\x1b`` or
``\\r`` and never reaches the terminal raw (the console already prints ``[...]`` as written, not as rich markup).
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from unirl.cli.args import EXIT_OK, verb_parser
from unirl.errors import UnirlError

DEFAULT_LIMIT = 24


def positive(text: str) -> int:
    value = int(text)
    if value < 1:
        raise argparse.ArgumentTypeError(f"must be at least 1, not {value}")
    return value


def parser() -> argparse.ArgumentParser:
    p = verb_parser("show", "A run's scored completions, grouped by prompt: each one's total, every reward and "
                            "component, and the error of a failed reward call. Without --step: the last recorded "
                            "step (with --errors or --prompt: every step).")
    p.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    p.add_argument("--step", metavar="N", type=int, help="the training step to show (see the steps the run recorded)")
    order = p.add_mutually_exclusive_group()
    order.add_argument("--worst", action="store_true", help="lowest total first")
    order.add_argument("--best", action="store_true", help="highest total first")
    order.add_argument("--errors", action="store_true", help="only completions whose reward call failed")
    p.add_argument("--prompt", metavar="TEXT", help="only prompts containing TEXT (case-insensitive)")
    p.add_argument("--limit", metavar="K", type=positive, default=DEFAULT_LIMIT,
                   help=f"at most K completions (default {DEFAULT_LIMIT})")
    p.add_argument("--json", action="store_true", help="the chosen records as JSON lines, as the run wrote them")
    return p


def cmd_show(args: list[str]) -> int:
    from unirl.record.report import Selection, check_run_dir, select, step_of, steps_text, trajectories
    from unirl.record.trajectory_log import existing

    ns = parser().parse_args(args)
    run_dir = check_run_dir(ns.run_dir, "show")
    records = trajectories(run_dir)
    if not records:
        where = existing(run_dir)
        raise UnirlError(f"{run_dir}: no completions recorded " + (f"in {where.name} yet" if where else
                         "(no trajectories.jsonl: logging.trajectories=false, or the run stopped before its "
                         "first step)"))
    steps = sorted({s for s in map(step_of, records) if s is not None})
    if ns.step is not None and ns.step not in steps:
        raise UnirlError(f"step {ns.step}: no completions recorded at that step in {run_dir}; recorded steps: "
                         f"{steps_text(steps) or 'none (the backend logged no step numbers)'}")
    step = ns.step
    if step is None and not (ns.errors or ns.prompt) and steps:
        step = steps[-1]
    order = "worst" if ns.worst else "best" if ns.best else "recorded"
    selection = Selection(step=step, order=order, errors_only=ns.errors, prompt=ns.prompt)
    matching = select(records, selection)
    shown = matching[:ns.limit]
    if ns.json:
        for record in shown:
            print(json.dumps(record, default=str))  # ensure_ascii: control characters stay escaped
        return EXIT_OK
    print_records(run_dir, shown, len(matching), step, steps, ns)
    return EXIT_OK


def print_records(run_dir: Path, shown: list[dict[str, Any]], matching: int, step: int | None, steps: list[int],
                  ns: argparse.Namespace) -> None:
    from rich.table import Table
    from rich.text import Text

    from unirl.console import console
    from unirl.record.report import (
        completion_text,
        error_lines,
        group_by_prompt,
        mapping,
        number,
        score_names,
        step_of,
        steps_text,
        visible,
    )

    out = console()
    where = f"step {step}" if step is not None else "every step"
    what = ("failed reward calls" if ns.errors else "completions") + (
        f" whose prompt contains {ns.prompt!r}" if ns.prompt else "")
    out.print(Text(visible(f"{run_dir}: {where} (recorded steps: {steps_text(steps) or 'none'})")), style="bold")
    if not shown:
        out.print(Text(visible(f"no {what} at {where}")))
        return
    groups = group_by_prompt(shown)
    order = " worst first" if ns.worst else " best first" if ns.best else ""
    out.print(Text(visible(f"{len(shown)} of {matching} {what}{order}, in {len(groups)} prompt group(s)"
                           + (f" (--limit {ns.limit})" if matching > len(shown) else ""))))
    scores = score_names(shown, "scores")
    components = score_names(shown, "components")
    for prompt, group in groups:
        totals = [r["total"] for r in group if isinstance(r.get("total"), int | float)]
        reference = group[0].get("reference")
        head = Text(f"\nprompt: {visible(prompt)}", style="bold cyan")
        if reference not in (None, ""):
            head.append(f"   reference: {visible(reference)}", style="cyan")
        head.append(f"   {len(group)} shown" + (f", mean total {sum(totals) / len(totals):.3f}" if totals else ""))
        out.print(head)
        table = Table(*(["step"] if step is None else []), "total", *scores, *components, "completion", "errors",
                      show_lines=True)
        for r in group:
            cells = [*([number(step_of(r), 0)] if step is None else []), number(r.get("total")),
                     *(number(mapping(r, "scores").get(n)) for n in scores),
                     *(number(mapping(r, "components").get(n)) for n in components)]
            table.add_row(*(Text(visible(c)) for c in cells), Text(visible(completion_text(r))),
                          Text(visible(error_lines(r)), style="red"))
        out.print(table)
