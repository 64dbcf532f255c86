"""``unirl parity [--frameworks trl,verl,openrlhf] [--python NAME=PATH ...] [--save BATCH.json] [--json]
[OVERRIDE ...]``: whether each backend computes what the recipe means, shown by numbers.

One frozen batch is built from the recipe (its data, its rewards; see :mod:`unirl.backend.parity.batch`), each
backend's own advantage and loss code runs on it in that backend's interpreter, configured from unirl's plan for
the recipe, and every quantity is compared with unirl's reference semantics (:mod:`unirl.backend.parity.reference`):
``equal``, ``design`` (a named difference the backend makes by construction, with its size), ``mismatch`` or
``refused``. The exit status is 1 when a row is a mismatch.
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from unirl.cli.args import EXIT_FAILED, EXIT_OK, overrides_argument, verb_parser
from unirl.errors import FieldError

DEFAULT_FRAMEWORKS = ("trl", "verl", "openrlhf")


def parse_pythons(items: list[str], known: list[str]) -> dict[str, str]:
    pythons = {}
    for item in items:
        name, eq, path = item.partition("=")
        if not eq or not path:
            raise FieldError("--python", item, "NAME=PATH, e.g. verl=.venvs/verl/bin/python")
        if name not in known:
            raise FieldError("--python", item, f"a framework among {known}")
        # a path as the user typed it, from where they typed it (a bare name is looked up on PATH later)
        pythons[name] = str(Path(path).absolute()) if "/" in path else path
    return pythons


def cmd_parity(args: list[str]) -> int:
    from unirl.backend.parity.batch import FrozenBatch, build
    from unirl.backend.parity.run import certificate
    from unirl.cli.run import normalise
    from unirl.host.manager import get_host
    from unirl.host.planning import check, compose, spec_from_recipe
    from unirl.recipe.compose import to_recipe

    parser = verb_parser("parity", (__doc__ or "").split("\n\n")[1].replace("\n", " "))
    parser.add_argument("--frameworks", default=",".join(DEFAULT_FRAMEWORKS),
                        help="comma-separated backends to certify (default: trl,verl,openrlhf)")
    parser.add_argument("--python", action="append", default=[], metavar="NAME=PATH",
                        help="a backend's interpreter (default: its framework.python, else this one)")
    parser.add_argument("--save", type=Path, metavar="BATCH.json", help="also write the frozen batch here")
    parser.add_argument("--batch", type=Path, metavar="BATCH.json", help="certify on this saved batch")
    parser.add_argument("--json", action="store_true", help='{"rows": [...], ...} on stdout')
    overrides_argument(parser)
    ns = parser.parse_intermixed_args(args)
    host = get_host()
    names = [n.strip() for n in ns.frameworks.split(",") if n.strip()]
    for name in names:
        host.frameworks.entry(name)  # an unknown name lists the installed ones
    pythons = parse_pythons(ns.python, host.frameworks.names())
    recipe = to_recipe(compose(host, normalise(ns.overrides, host.frameworks.names())))
    check(host, recipe)  # each backend resolves the recipe's auto fields for itself when it plans
    rewards = spec_from_recipe(recipe, host.rewards, can_exclude=False)
    batch = None
    if ns.batch:
        if not ns.batch.is_file():
            raise FieldError("--batch", str(ns.batch), "a batch file written by --save")
        batch = FrozenBatch.from_dict(json.loads(ns.batch.read_text()))
    batch = batch or build(recipe, rewards)
    if ns.save:
        batch.save(ns.save)
    result = certificate(host, recipe, rewards, names, pythons, batch)
    if ns.json:
        print(json.dumps(result.to_dict(), indent=2))
    else:
        print_certificate(result.to_dict())
    return EXIT_FAILED if result.mismatched else EXIT_OK


def print_certificate(data: dict[str, Any]) -> None:
    from rich.table import Table
    from rich.text import Text

    from unirl.console import console

    out = console()
    batch = data["batch"]
    out.print(Text(f"parity certificate: algorithm {data['algorithm']}, a frozen batch of {batch['completions']} "
                   f"completions in {batch['groups']} groups, {batch['tokens']} tokens (seed {batch['seed']})",
                   style="bold"))
    for note in batch.get("notes") or []:
        out.print(Text(f"  batch: {note}"))
    table = Table("backend", "quantity", "max abs diff", "max rel diff", "verdict", "why")
    styles = {"equal": "green", "design": "yellow", "mismatch": "red", "refused": "dim"}
    refused: list[tuple[str, str]] = []
    for row in data["rows"]:
        if row["verdict"] == "refused":
            if row["framework"] not in [f for f, _ in refused]:
                refused.append((row["framework"], row["reason"]))
            continue
        table.add_row(f"{row['framework']} {data['versions'].get(row['framework'], '')}".strip(), row["quantity"],
                      _number(row["max_abs_diff"]), _number(row["max_rel_diff"]),
                      Text(row["verdict"], style=styles.get(row["verdict"], "")), row["reason"])
    out.print(table)
    for framework, reason in refused:
        out.print(Text(f"refused: {framework}: {reason}"))
    for item in data["not_certified"]:
        out.print(Text(f"not certified: {item['framework']}: {item['why']}"))
    timing = ", ".join(f"{k} {v:.1f} s" for k, v in data["seconds"].items())
    out.print(Text(f"time: {timing}"))


def _number(value: float | None) -> str:
    return "-" if value is None else f"{value:.2e}"
