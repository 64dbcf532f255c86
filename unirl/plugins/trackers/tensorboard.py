"""TensorBoard: event files under ``<run dir>/tensorboard`` (``logging.tracker_options.tensorboard.dir``).

Written with TensorBoard's own writer (``tensorboard.summary.writer.event_file_writer.EventFileWriter``, the one
torch's ``SummaryWriter`` wraps), so no torch or TensorFlow is needed: each metric a scalar (``simple_value``, which
TensorBoard stores as float32) at unirl's step; held-out evaluations as ``eval/<key>`` scalars; the recipe and the
final summary as text (TensorBoard's text plugin) at step 0 and at the last step. ``tensorboard --logdir runs/``
shows every run. ``pip install 'unirl[tensorboard]'``.
"""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import Any

from unirl.plugins.trackers.plugin import Sink, TrackerPlugin, config_text, directory
from unirl.record.layout import RunInfo

NAME = "tensorboard"
DIR = "tensorboard"
FLUSH_SECS = 10  # what a killed run can lose; TensorBoard's own default is 120


class TensorBoardSink:
    def __init__(self, logdir: Path, recipe: dict[str, Any]) -> None:
        from tensorboard.compat.proto.event_pb2 import Event
        from tensorboard.compat.proto.summary_pb2 import Summary
        from tensorboard.summary.writer.event_file_writer import EventFileWriter

        self._event, self._summary = Event, Summary
        logdir.mkdir(parents=True, exist_ok=True)
        self.writer = EventFileWriter(str(logdir), flush_secs=FLUSH_SECS)
        self.last_step = 0
        self.text(0, "recipe", f"```json\n{config_text(recipe)}\n```")

    def scalars(self, step: int, values: dict[str, float]) -> None:
        if not values:
            return
        value = [self._summary.Value(tag=k, simple_value=v) for k, v in values.items()]
        self.writer.add_event(self._event(wall_time=time.time(), step=step, summary=self._summary(value=value)))
        self.last_step = max(self.last_step, step)

    def text(self, step: int, tag: str, text: str) -> None:
        from tensorboard.compat.proto.tensor_pb2 import TensorProto
        from tensorboard.compat.proto.tensor_shape_pb2 import TensorShapeProto
        from tensorboard.plugins.text.metadata import create_summary_metadata

        tensor = TensorProto(dtype="DT_STRING", string_val=[text.encode()],
                             tensor_shape=TensorShapeProto(dim=[TensorShapeProto.Dim(size=1)]))
        value = self._summary.Value(tag=tag, metadata=create_summary_metadata(tag, ""), tensor=tensor)
        self.writer.add_event(self._event(wall_time=time.time(), step=step, summary=self._summary(value=[value])))

    def metrics(self, step: int, metrics: dict[str, float]) -> None:
        self.scalars(step, metrics)

    def eval(self, step: int, summary: dict[str, float]) -> None:
        self.scalars(step, summary)

    def close(self, summary: dict[str, Any]) -> None:
        try:
            text = json.dumps(summary, indent=2, sort_keys=True, default=str)
            self.text(self.last_step, "summary", f"```json\n{text}\n```")
        finally:
            self.writer.close()


def open_sink(run: RunInfo, options: dict[str, Any]) -> Sink:
    return TensorBoardSink(directory(run, options.get("dir"), DIR), run.recipe)


PLUGIN = TrackerPlugin(NAME, open_sink)
unirl_run_start = PLUGIN.unirl_run_start
unirl_metrics = PLUGIN.unirl_metrics
unirl_eval_done = PLUGIN.unirl_eval_done
unirl_run_end = PLUGIN.unirl_run_end
