"""trackio: one trackio run per unirl run, in trackio's own local store unless a Space is named.

trackio keeps a project's runs in ``$TRACKIO_DIR/<project>.db`` (default ``~/.cache/huggingface/trackio``, read when
trackio is first imported, trackio/utils.py ``_get_trackio_dir``), where ``trackio show`` finds every run; so unirl
does not move it into the run directory. ``logging.tracker_options.trackio.space_id`` syncs to a Hugging Face Space
instead. The recipe is the run's config, each metric is logged at unirl's step, held-out evaluations as
``eval/<key>``, and the summary's numbers as ``summary/<key>`` at the last step. What trackio prints (where it
logs, how to open the dashboard) goes to unirl's log, not the terminal's output. ``pip install 'unirl[trackio]'``.
"""

from __future__ import annotations

import contextlib
import io
import logging
from collections.abc import Iterator
from typing import Any

from unirl.plugins.trackers.plugin import Sink, TrackerPlugin, default_name, scalars
from unirl.record.layout import RunInfo

NAME = "trackio"
log = logging.getLogger(__name__)


@contextlib.contextmanager
def _printed_to_log() -> Iterator[None]:
    out = io.StringIO()
    try:
        with contextlib.redirect_stdout(out):
            yield
    finally:
        for line in out.getvalue().splitlines():
            if line.strip():
                log.info("trackio: %s", line.strip())


class TrackioSink:
    def __init__(self, run: Any) -> None:
        self.run = run
        self.last_step = 0

    def metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.run.log(metrics, step=step)
        self.last_step = max(self.last_step, step)

    def eval(self, step: int, summary: dict[str, float]) -> None:
        self.run.log(summary, step=step)
        self.last_step = max(self.last_step, step)

    def close(self, summary: dict[str, Any]) -> None:
        with _printed_to_log():
            try:
                numbers = {f"summary/{k}": v for k, v in scalars(summary).items()}
                if numbers:
                    self.run.log(numbers, step=self.last_step)
            finally:
                self.run.finish()
                from trackio import context_vars

                # trackio's atexit hook finishes the current run again (trackio/__init__.py _cleanup_current_run);
                # trackio.finish() clears it the same way.
                if context_vars.current_run.get() is self.run:
                    context_vars.current_run.set(None)


def open_sink(run: RunInfo, options: dict[str, Any]) -> Sink:
    with _printed_to_log():
        import trackio

        handle = trackio.init(project=options.get("project") or "unirl", name=options.get("name") or default_name(run),
                              space_id=options.get("space_id"), config=run.recipe)
    return TrackioSink(handle)


PLUGIN = TrackerPlugin(NAME, open_sink)
unirl_run_start = PLUGIN.unirl_run_start
unirl_metrics = PLUGIN.unirl_metrics
unirl_eval_done = PLUGIN.unirl_eval_done
unirl_run_end = PLUGIN.unirl_run_end
