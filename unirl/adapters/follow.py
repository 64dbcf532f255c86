"""``python -m unirl.adapters.follow --run-dir RUN_DIR [--interval S] -- COMMAND...``: a native backend's command
under unirl's follower (:mod:`unirl.record.follow`), in the backend's own interpreter.

This is the follower's entrance from the light core: it loads the run's plugins as every other unirl process inside
a backend does (the list the host staged beside the light core, :func:`unirl.host.loading.backend_plugin_manager`),
reads the run (framework, recipe) from the ``plan.json`` the host wrote, and reports the whole run (``role=run``).
The follower itself lives in the record layer, which may not reach the plugin manager.
"""

from __future__ import annotations

import argparse
import json
import logging
import sys
from pathlib import Path
from typing import Any

from unirl.host.calls import LifecycleCalls
from unirl.host.loading import backend_plugin_manager, own_version
from unirl.record.follow import INTERVAL_S, Follower, exit_like
from unirl.record.layout import PLAN, ROLE_RUN, RunInfo


def run_info(run_dir: Path) -> RunInfo:
    plan: dict[str, Any] = {}
    try:
        plan = json.loads((run_dir / PLAN).read_text(encoding="utf-8"))
    except (OSError, ValueError) as exc:
        logging.getLogger(__name__).warning("unirl: %s has no readable plan.json (%s); the record names no recipe",
                                            run_dir, exc)
    return RunInfo(run_dir=run_dir, framework=str(plan.get("framework") or "native"),
                   recipe=dict(plan.get("recipe") or {}), extra={"follower": True}, role=ROLE_RUN)


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    if "--" not in argv:
        print("usage: python -m unirl.adapters.follow --run-dir RUN_DIR [--interval S] -- COMMAND...", file=sys.stderr)
        return 2
    split = argv.index("--")
    parser = argparse.ArgumentParser(prog="unirl.adapters.follow")
    parser.add_argument("--run-dir", required=True, type=Path)
    parser.add_argument("--interval", type=float, default=INTERVAL_S)
    ns = parser.parse_args(argv[:split])
    command = argv[split + 1:]
    if not command:
        parser.error("no command after --")
    logging.basicConfig(level=logging.INFO, format="%(message)s")
    run_dir = ns.run_dir.resolve()
    hooks = LifecycleCalls(backend_plugin_manager(own_version()))
    follower = Follower(run_info(run_dir), command, hooks, interval=ns.interval)
    return exit_like(follower.run_child())


if __name__ == "__main__":
    sys.exit(main())
