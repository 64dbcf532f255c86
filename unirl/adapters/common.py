"""What every backend adapter shares: the process-wide executor for a spec, the trajectory log, native rows."""

from __future__ import annotations

import math
import os
import threading
from pathlib import Path
from typing import Any

from unirl.record.layout import append_jsonl
from unirl.record.trajectory_log import TrajectorySampling
from unirl.rewards.contract import Sample
from unirl.rewards.executor import RewardExecutor, ScoredSample
from unirl.rewards.spec import RewardRuntimeSpec

SPEC_ENV = "UNIRL_REWARD_SPEC"
ERRORS_KEY = "unirl/reward_errors"


class BackendRewards:
    """The rewards of one run inside one backend process: scoring, the error policy, the trajectory log."""

    def __init__(self, spec: RewardRuntimeSpec, backend: str) -> None:
        spec.check(backend)
        self.spec = spec
        self.backend = backend
        self.executor = RewardExecutor(spec)

    def score(self, samples: list[Sample]) -> list[ScoredSample]:
        """Score, log every sample (with errors and tracebacks), then apply the policy (may raise RewardAbort)."""
        scored = self.executor.score(samples)
        if self.spec.trajectory_log:
            records = [trajectory_record(s, r, backend=self.backend, pid=os.getpid())
                       for s, r in zip(samples, scored, strict=True)]
            sampling = TrajectorySampling(per_group=self.spec.trajectory_per_group)
            append_jsonl(Path(self.spec.trajectory_log), sampling.select(records))
        self.executor.check_policy(scored)
        return scored


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


def _num(value: float | None) -> float:
    return math.nan if value is None else float(value)


_RUNTIMES: dict[tuple[str, str], BackendRewards] = {}
_LOCK = threading.Lock()


def runtime_for(backend: str, spec_path: str | None = None) -> BackendRewards:
    """The process-wide runtime for a spec file (``spec_path`` or ``$UNIRL_REWARD_SPEC``), built once."""
    path = spec_path or os.environ.get(SPEC_ENV)
    if not path:
        from unirl.errors import UnirlError

        raise UnirlError(f"the unirl {backend} reward adapter needs the run's reward specification: set {SPEC_ENV} "
                         "to its JSON file (unirl's plan does this)")
    key = (backend, os.path.abspath(path))
    with _LOCK:
        runtime = _RUNTIMES.get(key)
        if runtime is None:
            runtime = _RUNTIMES[key] = BackendRewards(RewardRuntimeSpec.read(path), backend)
        return runtime
