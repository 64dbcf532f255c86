"""``unirl stop RUN_DIR``: stop a run's job (local process, Ray job, Slurm job).

A run that ended, or a pid or job id that is not the run's, is refused (:func:`unirl.launch.scheduler.stoppable_record`
and the scheduler's own ``stop``); what the scheduler says it stopped is the command's output.
"""

from __future__ import annotations

from pathlib import Path

from unirl.cli.args import EXIT_OK, verb_parser
from unirl.errors import UnirlError


def cmd_stop(args: list[str]) -> int:
    from unirl.host.manager import get_host
    from unirl.launch.scheduler import stoppable_record

    parser = verb_parser("stop", "Stop a run's job (local process, Ray job, Slurm job); a run that ended, or a "
                                 "pid or job id that is not the run's, is refused.")
    parser.add_argument("run_dir", metavar="RUN_DIR", type=Path)
    run_dir = parser.parse_args(args).run_dir.resolve()
    record = stoppable_record(run_dir)  # a run that ended, or a job.json that does not parse, is refused here
    record["run_dir"] = str(run_dir)
    scheduler = get_host().schedulers.get(record["scheduler"])
    marker = run_dir / ".stop_requested"
    marker.touch()  # the waiting scheduler records "cancelled", not a failure
    try:
        print(scheduler.stop(record))
    except UnirlError:  # the scheduler refused (not the run's process or job): nothing was stopped
        marker.unlink(missing_ok=True)
        raise
    return EXIT_OK
