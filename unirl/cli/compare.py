"""``unirl compare MULTIRUN_DIR [--json]``: a sweep's members side by side, plus ``compare.png`` (reward curves)."""

from __future__ import annotations

from pathlib import Path

from unirl.cli.args import EXIT_FAILED, EXIT_OK, verb_parser
from unirl.errors import UnirlError


def cmd_compare(args: list[str]) -> int:
    from unirl.launch.sweep import compare, plot_curves, print_compare

    parser = verb_parser("compare", "A sweep's members side by side, plus compare.png with their reward curves.")
    parser.add_argument("sweep_dir", metavar="MULTIRUN_DIR", type=Path)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_intermixed_args(args)
    try:
        rows = compare(ns.sweep_dir)
    except FileNotFoundError as exc:
        raise UnirlError(str(exc)) from None
    png = plot_curves(rows, ns.sweep_dir / "compare.png")
    if ns.json:
        import json

        print(json.dumps({"members": rows, "png": str(png) if png else None}, indent=2, default=str))
    else:
        print_compare(rows, png)
    return EXIT_OK if all(r["state"] == "completed" for r in rows) else EXIT_FAILED
