"""MLflow: one MLflow run per unirl run, in ``sqlite:///<run dir>/mlflow.db`` unless
``logging.tracker_options.mlflow.tracking_uri`` names another store or a server.

Through ``MlflowClient`` (mlflow-skinny's client; its SQL store needs SQLAlchemy and Alembic, which the extra adds:
mlflow 3's file store refuses to start unless ``MLFLOW_ALLOW_FILE_STORE=true``, mlflow/store/tracking/file_store.py
``FileStore.__init__``). The recipe becomes the run's params (dotted keys, ``algorithm.lr``; lists as JSON), each
metric is logged at unirl's step (buffered, sent in MLflow's asynchronous batches every 1,000 metrics or 5 s, waited
for at the end), held-out evaluations as ``eval/<key>``, the summary's numbers as ``summary/<key>`` at the last step
and its text (``state``, ``error``) as tags ``unirl.<key>``; the run ends FINISHED (completed), FAILED or KILLED
(interrupted). The default store's experiment keeps its artifacts in ``<run dir>/mlflow-artifacts``.
``mlflow ui --backend-store-uri sqlite:///<run dir>/mlflow.db`` (the full ``mlflow`` package) shows it.
``pip install 'unirl[mlflow]'``.
"""

from __future__ import annotations

import time
from typing import Any

from unirl.plugins.trackers.plugin import Sink, TrackerPlugin, default_name, flatten, scalars
from unirl.record.layout import RunInfo

NAME = "mlflow"
STORE = "mlflow.db"
ARTIFACTS = "mlflow-artifacts"
STATUS = {"completed": "FINISHED", "interrupted": "KILLED"}  # anything else: FAILED
# mlflow/utils/validation.py (3.17): MAX_PARAMS_TAGS_PER_BATCH 100, MAX_METRICS_PER_BATCH 1000,
# MAX_PARAM_VAL_LENGTH 6000, MAX_TAG_VAL_LENGTH 8000, MAX_ENTITY_KEY_LENGTH 250.
PARAMS_PER_BATCH, METRICS_PER_BATCH, PARAM_CHARS, TAG_CHARS, KEY_CHARS = 100, 1000, 6000, 8000, 250
FLUSH_SECS = 5.0  # buffered metrics reach the store at least this often (and at 1,000 metrics, and at the end)


def _key(name: str) -> str:
    """A name MLflow takes as a key: no leading or doubled slash (it refuses names that normalise as paths to
    another), at most 250 characters."""
    while "//" in name:
        name = name.replace("//", "/")
    return name.strip("/")[:KEY_CHARS] or "_"


class MlflowSink:
    def __init__(self, client: Any, run_id: str, recipe: dict[str, Any]) -> None:
        from mlflow.entities import Param

        self.client, self.run_id = client, run_id
        self.pending: list[Any] = []
        self.buffer: list[Any] = []
        self.flushed = time.time()
        self.last_step = 0
        params = [Param(_key(k), str(v)[:PARAM_CHARS]) for k, v in flatten(recipe).items()]
        for i in range(0, len(params), PARAMS_PER_BATCH):
            client.log_batch(run_id, params=params[i:i + PARAMS_PER_BATCH])

    def _log(self, step: int, values: dict[str, float]) -> None:
        from mlflow.entities import Metric

        now = time.time()
        self.buffer += [Metric(_key(k), v, int(now * 1000), step) for k, v in values.items()]
        self.last_step = max(self.last_step, step)
        if len(self.buffer) >= METRICS_PER_BATCH or now - self.flushed >= FLUSH_SECS:
            self._flush()

    def _flush(self) -> None:
        """The buffered metrics in MLflow's asynchronous batches of at most 1,000 (its limit per call): the SQL
        store's cost is per call more than per metric (one step's 41 metrics a call: 22 ms; 24 steps' 984: 4 ms a
        step, measured here), and the run's thread does not wait for it."""
        buffer, self.buffer, self.flushed = self.buffer, [], time.time()
        for i in range(0, len(buffer), METRICS_PER_BATCH):
            operation = self.client.log_batch(self.run_id, metrics=buffer[i:i + METRICS_PER_BATCH], synchronous=False)
            if operation is not None:
                self.pending.append(operation)

    def metrics(self, step: int, metrics: dict[str, float]) -> None:
        self._log(step, metrics)

    def eval(self, step: int, summary: dict[str, float]) -> None:
        self._log(step, summary)

    def close(self, summary: dict[str, Any]) -> None:
        from mlflow.entities import RunTag

        try:
            self._log(self.last_step, {f"summary/{k}": v for k, v in scalars(summary).items()})
            self._flush()
            for operation in self.pending:
                operation.wait()
            texts = {k: v for k, v in summary.items() if isinstance(v, str)}
            self.client.log_batch(self.run_id, tags=[RunTag(_key(f"unirl.{k}"), v[:TAG_CHARS])
                                                     for k, v in list(texts.items())[:PARAMS_PER_BATCH]])
        finally:
            self.client.set_terminated(self.run_id, STATUS.get(str(summary.get("state")), "FAILED"))


def open_sink(run: RunInfo, options: dict[str, Any]) -> Sink:
    from mlflow.tracking import MlflowClient

    uri = options.get("tracking_uri")
    artifacts = None
    if not uri:
        run.run_dir.mkdir(parents=True, exist_ok=True)
        uri = f"sqlite:///{run.path(STORE)}"
        artifacts = run.path(ARTIFACTS).as_uri()
    client = MlflowClient(tracking_uri=uri)
    name = options.get("experiment") or "unirl"
    experiment = client.get_experiment_by_name(name)
    experiment_id = experiment.experiment_id if experiment is not None else client.create_experiment(
        name, artifact_location=artifacts)
    created = client.create_run(experiment_id, run_name=options.get("run_name") or default_name(run),
                                tags={"unirl.framework": run.framework, "unirl.run_dir": str(run.run_dir)})
    return MlflowSink(client, created.info.run_id, run.recipe)


PLUGIN = TrackerPlugin(NAME, open_sink)
unirl_run_start = PLUGIN.unirl_run_start
unirl_metrics = PLUGIN.unirl_metrics
unirl_eval_done = PLUGIN.unirl_eval_done
unirl_run_end = PLUGIN.unirl_run_end
