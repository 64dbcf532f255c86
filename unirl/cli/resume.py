"""``unirl resume RUN_DIR [--force] [OVERRIDE ...]``: continue a run from its last complete checkpoint.

The run restarts through the default verb (:func:`unirl.cli.run.cmd_run`) with the overrides it started with
(:func:`unirl.launch.resume.resume_overrides`), in the same directory; ``--force`` accepts changed overrides, each
recorded in ``manifest.json``. A completed run is not run again.
"""

from __future__ import annotations

from pathlib import Path

from unirl.cli.args import overrides_argument, verb_parser
from unirl.errors import UnirlError


def cmd_resume(args: list[str]) -> int:
    from unirl.cli.run import cmd_run
    from unirl.launch.resume import requested, resume_overrides

    parser = verb_parser("resume", "Continue a run from its last complete checkpoint, with the recipe it started "
                                   "with; a completed run is not run again.")
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    parser.add_argument("--force", action="store_true",
                        help="accept changed overrides (each change is recorded in manifest.json)")
    overrides_argument(parser)
    ns = parser.parse_intermixed_args(args)
    run_dir = ns.run_dir.resolve()
    if not (run_dir / ".hydra" / "overrides.yaml").exists():
        raise UnirlError(f"run.resume: {run_dir} is not a unirl run directory (no .hydra/overrides.yaml)")
    with requested(run_dir, ns.force, ["unirl", "resume", *args]):
        return cmd_run([*resume_overrides(run_dir), *ns.overrides])
