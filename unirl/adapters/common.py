"""What every backend adapter shares: the process-wide rewards of a spec (executor, error policy, this process's part
of the run record), native rows.

Each process of a native backend that scores rewards reports what it scored through a
:class:`~unirl.record.run_recorder.RunRecorder` (``run.role == "scorer"``) with the plugins the host staged beside
the light core: ``unirl_run_start`` when the process first scores, ``unirl_rollouts_scored`` for every batch,
``unirl_run_end`` at the process's normal exit or when the reward policy aborts (a process killed by a signal reports
no end). The trajectory log is written by unirl's own recorder plugin from those records, with the run's
``logging.trajectories_*`` options.

No native trainer tells its reward function the step. But unirl writes the backend's data files itself
(:mod:`unirl.backend.export`): the train file holds exactly ``steps x prompts_per_step`` rows in unirl's seeded order
and the backends' own shuffles are off, so a row's position in that file fixes its step, ``index // prompts_per_step
+ 1``. Where the backend hands the row's metadata to the reward (verl's ``extra_info``, slime's ``sample.metadata``),
the adapter passes it as the sample's *origin* and each record is tagged (:func:`row_tags`): ``step`` for a train row,
``split: eval`` for a held-out one. An origin that does not identify a row of unirl's files (missing, malformed or out
of range: a user's own file through ``framework.overrides``) leaves the record step-less, counted in the process's
``rows_unidentified`` and marked ``row_unidentified`` in the log, never guessed. OpenRLHF's reward function gets
queries, prompts and labels only (openrlhf/utils/agent.py:316-322, 0.11.2), NeMo RL's environment the message log and
``extra_env_info``, which holds the reference alone (ResponseDataset keeps input and output only,
response_dataset.py:54-85, processors.py:389-392 @ v0.7.0): their records stay step-less.
"""

from __future__ import annotations

import atexit
import collections
import contextlib
import json
import math
import numbers
import os
import threading
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from unirl.errors import UnirlError
from unirl.host.calls import LifecycleCalls
from unirl.host.loading import backend_plugin_manager, own_version
from unirl.record.layout import PLAN, ROLE_SCORER, RunInfo
from unirl.record.run_recorder import RunRecorder
from unirl.rewards.contract import Sample
from unirl.rewards.executor import RewardAbort, RewardExecutor, ScoredSample
from unirl.rewards.spec import RewardPolicy, RewardRuntimeSpec

SPEC_ENV = "UNIRL_REWARD_SPEC"
ERRORS_KEY = "unirl/reward_errors"
TRAIN_SPLIT, EVAL_SPLIT = "train", "eval"  # unirl.backend.export's split names (DataExport.split)


def row_tags(origin: Mapping[str, Any] | None, prompts_per_step: int | None,
             steps: int | None, in_order: bool = True) -> dict[str, Any] | None:
    """What a scored record says about its row, from the row's metadata as unirl's exporter wrote it (``split``,
    ``index``): ``{"step": n, "split": "train", "index": i}`` for row ``i`` of the train file (``n = i //
    prompts_per_step + 1``), ``{"step": None, "split": "eval", "index": i}`` for a held-out row, None where the origin
    does not identify a row of unirl's files (no split or index, an index that is not a whole number, a train index
    beyond ``steps x prompts_per_step``, or no ``prompts_per_step`` to count with).

    ``in_order=False``: the backend draws the train file in an order of its own (OpenRLHF), so a train row's place
    does not tell its step: ``{"step": None, "split": "train", "index": i}``."""
    if not isinstance(origin, Mapping):
        return None
    split, index = origin.get("split"), origin.get("index")
    if not isinstance(index, numbers.Integral) or isinstance(index, bool) or int(index) < 0:
        return None
    index = int(index)
    if split == EVAL_SPLIT:
        return {"step": None, "split": EVAL_SPLIT, "index": index}
    if split != TRAIN_SPLIT or not prompts_per_step or prompts_per_step < 1:
        return None
    if steps and index >= steps * prompts_per_step:
        return None
    if not in_order:
        return {"step": None, "split": TRAIN_SPLIT, "index": index}
    return {"step": index // prompts_per_step + 1, "split": TRAIN_SPLIT, "index": index}


def _positive_int(value: Any) -> int | None:
    return int(value) if isinstance(value, int) and not isinstance(value, bool) and value > 0 else None


class BackendRewards:
    """The rewards of one run inside one backend process: scoring, the error policy, the run record's part."""

    def __init__(self, spec: RewardRuntimeSpec, backend: str, spec_path: str | Path | None = None) -> None:
        spec.check(can_exclude=False, backend=backend)  # every backend these adapters serve needs a number
        self.spec = spec
        self.backend = backend
        self.executor = RewardExecutor(spec)
        self._started = time.monotonic()
        self.recorder = RunRecorder(scorer_run(spec, backend, spec_path),
                                    LifecycleCalls(backend_plugin_manager(own_version())))
        # The step arithmetic's numbers, from the plan the host wrote beside the spec (a hand-written spec has none:
        # then no record is given a step).
        algorithm = self.recorder.run.recipe.get("algorithm") or {}
        self.prompts_per_step = _positive_int(algorithm.get("prompts_per_step"))
        self.steps = _positive_int(algorithm.get("steps"))
        self.rows_unidentified = 0
        """Samples whose origin was given but does not identify a row of unirl's files (left step-less)."""
        self.recorder.run_start()
        atexit.register(self.end)  # a backend process ends without telling its reward function

    def score(self, samples: list[Sample], origins: Sequence[Mapping[str, Any] | None] | None = None,
              in_order: bool = True,
              episodes: Sequence[tuple[float | None, dict[str, Any] | None]] | None = None) -> list[ScoredSample]:
        """Score, record every sample (with errors and tracebacks), then apply the policy (may raise RewardAbort).

        ``origins``: per sample, the row metadata the backend passed (None: the backend passes none); each record is
        tagged with its step or as eval where it identifies a row (:func:`row_tags`; ``in_order`` as there).
        ``episodes``: per sample, the environment episode it is the transcript of, as ``(return or None when the
        episode failed, its record)``, kept in the sample's own record (:func:`merge_episode`)."""
        scored = self.executor.score(samples)
        pid = os.getpid()
        records = []
        for i, (sample, result) in enumerate(zip(samples, scored, strict=True)):
            tags: dict[str, Any] = {"step": None}
            if origins is not None and origins[i] is not None:
                found = row_tags(origins[i], self.prompts_per_step, self.steps, in_order)
                if found is None:
                    self.rows_unidentified += 1
                    tags["row_unidentified"] = True
                else:
                    tags = found
            records.append(trajectory_record(sample, result, backend=self.backend, pid=pid, **tags))
            if episodes is not None:
                merge_episode(records[-1], *episodes[i])
        steps = {r["step"] for r in records}
        self.recorder.rollouts_scored(steps.pop() if len(steps) == 1 else None, records)
        try:
            self.executor.check_policy(scored)
        except RewardAbort as exc:
            self.end("failed", str(exc))  # the backend may die of it without running exit handlers
            raise
        return scored

    def end(self, state: str = "completed", error: str | None = None) -> None:
        """This process's part of the run ends: ``unirl_run_end`` with its reward counts (once; later calls do
        nothing)."""
        stats = self.executor.stats
        summary: dict[str, Any] = {
            "state": state, "backend": self.backend, "pid": os.getpid(), "reward_calls": stats.calls,
            "reward_errors": stats.errors, "reward_errors_by_kind": dict(stats.by_kind),
            "rows_unidentified": self.rows_unidentified, "wall_time_s": time.monotonic() - self._started}
        if stats.first_error is not None:
            summary["first_reward_error"] = stats.first_error
        if error:
            summary["error"] = error
        self.recorder.run_end(summary)


def scorer_run(spec: RewardRuntimeSpec, backend: str, spec_path: str | Path | None) -> RunInfo:
    """The run as a scoring process sees it: its directory (the trajectory log's, else the spec's), framework and
    recipe from the plan the host wrote beside the spec, and the spec's trajectory settings, which decide the log."""
    log = spec.trajectory_log
    spec_dir = Path(spec_path).resolve().parent if spec_path else None
    run_dir = Path(log).parent if log else spec_dir or Path.cwd()
    plan: dict[str, Any] = {}
    with contextlib.suppress(OSError, ValueError):  # a spec written by hand or by a test has no plan beside it
        plan = json.loads(((spec_dir or run_dir) / PLAN).read_text(encoding="utf-8"))
    recipe = dict(plan.get("recipe") or {})
    recipe["logging"] = {**(recipe.get("logging") or {}), "trajectories": log is not None,
                         "trajectories_per_group": spec.trajectory_per_group,
                         "trajectories_compress": bool(log and log.endswith(".gz"))}
    return RunInfo(run_dir=run_dir, framework=str(plan.get("framework") or backend), recipe=recipe,
                   extra={"backend": backend, "pid": os.getpid()}, role=ROLE_SCORER)


def native_keys(spec: RewardRuntimeSpec) -> list[str]:
    return ["score", *spec.names, *spec.component_keys(), ERRORS_KEY]


def native_row(scored: ScoredSample) -> dict[str, float]:
    """The fixed native key set (:func:`native_keys`): ``score``, every reward and component (NaN where a call
    failed), the error count. The executor fills scores and components in the spec's order, every sample."""
    row = {"score": _num(scored.total)}
    for name, value in scored.scores.items():
        row[name] = _num(value)
    for key, value in scored.components.items():
        row[key] = _num(value)
    row[ERRORS_KEY] = float(len(scored.errors))
    return row


def trajectory_record(sample: Sample, scored: ScoredSample, **extra: Any) -> dict[str, Any]:
    record: dict[str, Any] = {
        **extra, "prompt": sample.prompt, "completion": sample.completion, "reference": sample.reference,
        "data_source": sample.data_source, "truncated": sample.truncated, "total": scored.total,
        "scores": scored.scores, "components": scored.components, "errors": scored.errors,
    }
    if scored.error_kinds:
        record["error_kinds"] = scored.error_kinds
    if scored.info:
        record["info"] = scored.info
    return record


ENVIRONMENT = "environment"
"""The episode's return, as a reward column beside the recipe's rewards."""


def merge_episode(record: dict[str, Any], value: float | None, episode: dict[str, Any] | None) -> None:
    """A scored transcript's record with its episode: the return as the ``environment`` score (added to the total),
    the episode turn by turn, and a failed episode as an error of its kind, never a zero score."""
    record["scores"] = {ENVIRONMENT: value, **record["scores"]}
    record["total"] = record["total"] + (value or 0.0)
    record["episode"] = episode
    if value is None:
        record["errors"] = {**record["errors"], ENVIRONMENT: (episode or {}).get("error") or "failed"}
        record["error_kinds"] = {**record.get("error_kinds", {}),
                                 ENVIRONMENT: (episode or {}).get("error_kind") or "exception"}


class EpisodeFailures:
    """Failed episodes under the reward policy: abort at the first with ``on_error=abort``, or when more than
    ``max_error_rate`` of the last ``error_window`` episodes failed (from ``min_calls`` episodes on), as failing
    reward calls would."""

    def __init__(self, policy: RewardPolicy) -> None:
        self.policy = policy
        self.episodes = 0
        self.failed = 0
        self.recent: collections.deque[bool] = collections.deque(maxlen=max(1, policy.error_window))

    def check(self, returns: Sequence[float | None]) -> None:
        policy = self.policy
        for value in returns:
            self.episodes += 1
            self.failed += value is None
            self.recent.append(value is None)
        if policy.on_error == "abort" and self.failed:
            raise UnirlError(f"{self.failed} environment episodes failed (reward_policy.on_error=abort); "
                             "trajectories.jsonl holds each episode's error and traceback")
        failed, seen = sum(self.recent), len(self.recent)
        if self.episodes >= policy.min_calls and failed / seen > policy.max_error_rate:
            raise UnirlError(f"{failed} of the last {seen} environment episodes failed ({failed / seen:.1%}), "
                             f"above reward_policy.max_error_rate={policy.max_error_rate}; trajectories.jsonl holds "
                             "each episode's error and traceback")


def _num(value: float | None) -> float:
    return math.nan if value is None else float(value)


_RUNTIMES: dict[tuple[str, str], BackendRewards] = {}
_LOCK = threading.Lock()


def runtime_for(backend: str, spec_path: str | None = None) -> BackendRewards:
    """The process-wide runtime for a spec file (``spec_path`` or ``$UNIRL_REWARD_SPEC``), built once."""
    path = spec_path or os.environ.get(SPEC_ENV)
    if not path:
        raise UnirlError(f"the unirl {backend} reward adapter needs the run's reward specification: set {SPEC_ENV} "
                         "to its JSON file (unirl's plan does this)")
    key = (backend, os.path.abspath(path))
    with _LOCK:
        runtime = _RUNTIMES.get(key)
        if runtime is None:
            runtime = _RUNTIMES[key] = BackendRewards(RewardRuntimeSpec.read(path), backend, path)
        return runtime


def end_runtimes(state: str, error: str) -> None:
    """End every runtime of this process (an adapter about to end the process without exit handlers)."""
    with _LOCK:
        runtimes = list(_RUNTIMES.values())
    for runtime in runtimes:
        runtime.end(state, error)
