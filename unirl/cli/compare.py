"""``unirl compare MULTIRUN_DIR [MULTIRUN_DIR ...] [--json]``: sweeps' members side by side, seeds aggregated per
configuration, plus ``compare.png`` (reward curves); and the same table where a sweep (``unirl -m ...``) ends
(:func:`print_sweep_end`)."""

from __future__ import annotations

import logging
from pathlib import Path
from typing import Any

from unirl.cli.args import EXIT_FAILED, EXIT_OK, verb_parser
from unirl.errors import UnirlError

log = logging.getLogger(__name__)


def cmd_compare(args: list[str]) -> int:
    from unirl.launch.sweep import COMPARE_PNG, SMOOTHING, compare, configurations, plot_curves, print_compare

    parser = verb_parser("compare", "A sweep's members side by side, seeds aggregated per configuration (members "
                                    f"that differ only in seed), plus {COMPARE_PNG} with their reward curves. "
                                    f"Final reward: {SMOOTHING}.")
    parser.add_argument("sweep_dir", metavar="MULTIRUN_DIR", type=Path)
    parser.add_argument("more", metavar="MULTIRUN_DIR", type=Path, nargs="*",
                        help="more sweeps compared with the first (e.g. the same experiment on another backend)")
    parser.add_argument("--json", action="store_true", help="members and configurations as JSON")
    ns = parser.parse_intermixed_args(args)
    try:
        rows = compare(ns.sweep_dir, *ns.more)
    except FileNotFoundError as exc:
        raise UnirlError(str(exc)) from None
    png = plot_curves(rows, ns.sweep_dir / COMPARE_PNG)
    if ns.json:
        import json

        result: dict[str, Any] = {"members": rows, "configurations": configurations(rows),
                                  "final_reward": SMOOTHING, "png": str(png) if png else None}
        print(json.dumps(result, indent=2, default=str))
    else:
        print_compare(rows, png)
    return EXIT_OK if all(r["state"] == "completed" for r in rows) else EXIT_FAILED


def print_sweep_end(sweep_dir: Path) -> None:
    """What a finished sweep prints last: the compare table, ``compare.png`` and the multirun directory.

    Never changes the sweep's exit status: a sweep Hydra ran no member of (``--cfg``) prints nothing, and a
    directory that cannot be compared is a warning."""
    from unirl.launch.sweep import COMPARE_PNG, compare, plot_curves, print_compare

    try:
        rows = compare(sweep_dir)
    except FileNotFoundError:
        return
    except Exception as exc:  # e.g. a member's outcome.json torn by a kill: the sweep's status stands
        log.warning("cannot compare the sweep's members (%s: %s); its directory: %s", type(exc).__name__, exc,
                    sweep_dir)
        return
    try:
        png = plot_curves(rows, sweep_dir / COMPARE_PNG)
    except Exception as exc:  # a picture must not fail a finished sweep
        log.warning("could not draw %s: %s: %s", COMPARE_PNG, type(exc).__name__, exc)
        png = None
    print_compare(rows, png, sweep_dir)
