"""The metrics bridge: a native backend's own logs, read as they grow, become unirl's run record.

Sources, each read incrementally by byte offset (a torn last line or record is left for the next read):
- verl's ``file`` logger: ``<run>/native/verl_metrics.<attempt>.jsonl``, one ``{"step": N, "data": {...}}`` line per
  step, written unbuffered (verl/utils/tracking.py:529-548, 0.9.1); one file per attempt, since verl opens it
  with ``"wb"`` and would truncate an earlier attempt's;
- TensorBoard event files anywhere under ``<run>/native`` and ``<run>/logs`` (OpenRLHF, NeMo RL, slime, vime; verl
  when asked), each file on its own (:mod:`unirl.record.tb_events`);
- unirl's own reward log (``trajectories.jsonl``), which every backend's reward adapter appends to: its records
  count the run's reward calls and errors, and where a record carries its step (verl and slime rows say which step
  they train in, unirl/adapters/common.py ``row_tags``), the step's reward columns come from it, named as TRL's
  runner names them (``reward/total/mean``, ``/std``, ``reward/<name>/mean``, ``reward/<reward>/<component>``,
  ``reward/errors``): the same numbers on every backend, before any filtering, shaping or normalisation of the
  backend's. The backend's own reward numbers stay under ``native/``.
- held-out records (``split: eval``) become ``eval.jsonl`` sample rows of the backend's next eval summary: a backend
  scores its validation's samples before it logs the validation's metrics (verl ``_validate`` inside ``fit``, before
  ``logger.log``; slime's eval rollout before its ``eval/`` log), and the native logs are read before the reward log
  in every poll, so a summary's samples have always been read when the summary is. A summary takes the waiting
  held-out records in log order up to the first repeat of a held-out prompt (its row index): what follows the
  repeat is the next validation, scored before this poll and logged after it. The summary's ``accuracy`` is then
  unirl's, as TRL's eval computes it (``eval.accuracy_reward`` >= ``eval.accuracy_threshold``), with the backend's
  own numbers under ``native``. With several samples per held-out prompt (verl ``val_kwargs.n``, slime
  ``--n-samples-per-eval-prompt`` > 1) a repeat does not end a validation: then only the first sample of each prompt
  is counted, the rest wait for the next summary.

Names go through the backend's :class:`~unirl.record.vocabulary.Vocabulary`; every step's row is handed to a
:class:`~unirl.record.run_recorder.RunRecorder` (``unirl_metrics``; held-out metrics as ``unirl_eval_done``), so
``metrics.jsonl``, the progress bar and every tracker see a native backend as they see TRL.

A step's row is written once it is complete: a verl line is a whole step; a TensorBoard step is complete when every
step axis that has logged anything has moved past it (slime logs updates and rollouts from two processes), or at
the final drain.
"""

from __future__ import annotations

import json
import math
import statistics
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from unirl.record.run_recorder import RunRecorder
from unirl.record.tb_events import EventFileReader, event_files
from unirl.record.trajectory_log import PLAIN
from unirl.record.vocabulary import NATIVE_PREFIX, Vocabulary, accuracy_reward, vocabulary

EVAL_SPLIT = "eval"
"""The split a held-out record carries (unirl/adapters/common.py ``row_tags``)."""

NATIVE_DIR = "native"
"""Where the backends are told to log: ``<run>/native``."""
TB_DIR = f"{NATIVE_DIR}/tb"
VERL_FILE_PATTERN = "verl_metrics.*.jsonl"
NEMO_RL_LOG_DIR = "logs"
ATTEMPT = "{attempt}"
"""Replaced by the follower with this attempt's number (verl's file logger path)."""


def verl_metrics_file(attempt: int | str) -> str:
    return f"verl_metrics.{attempt}.jsonl"


class JsonlTail:
    """A JSON-lines file read incrementally: whole lines only, a torn last line kept for the next read."""

    def __init__(self, path: Path) -> None:
        self.path = path
        self.offset = 0

    def read(self) -> list[dict[str, Any]]:
        try:
            with self.path.open("rb") as f:
                f.seek(self.offset)
                data = f.read()
        except OSError:
            return []
        end = data.rfind(b"\n")
        if end < 0:
            return []
        self.offset += end + 1
        out: list[dict[str, Any]] = []
        for line in data[:end].split(b"\n"):
            if not line.strip():
                continue
            try:
                record = json.loads(line)
            except ValueError:
                continue  # a line a killed writer left half-written, then appended to: skipped, as unirl's readers do
            if isinstance(record, dict):
                out.append(record)
        return out


@dataclass
class _Step:
    values: dict[str, list[float]] = field(default_factory=dict)
    evals: dict[str, float] = field(default_factory=dict)
    complete: bool = False
    first_seen: float = 0.0


class MetricsBridge:
    """Reads a run's native logs and feeds its recorder; :meth:`poll` as often as wanted, :meth:`drain` at the end."""

    def __init__(self, run_dir: Path, backend: str, recipe: dict[str, Any], recorder: RunRecorder,
                 vocab: Vocabulary | None = None, use_tensorboard: bool | None = None,
                 attempt: int | None = None) -> None:
        self.run_dir = run_dir
        self.attempt = attempt
        """This follower's attempt: its verl file log is the only one it reads (an earlier attempt's steps are in the
        record already, written by that attempt's follower); None: every attempt's."""
        self.backend = backend
        self.recipe = recipe
        self.recorder = recorder
        self.vocab = vocab or vocabulary(backend)
        self.use_tensorboard = use_tensorboard
        self._jsonl: dict[Path, JsonlTail] = {}
        self._events: dict[Path, EventFileReader] = {}
        self._rewards: JsonlTail | None = None
        self._steps: dict[int, _Step] = {}
        self._axis_max: dict[str, int] = {}
        self._emitted: set[int] = set()
        self.rows = 0
        self.evals = 0
        self.last_step: int | None = None
        self.reward_calls = 0
        self.reward_errors = 0
        self.reward_errors_by_kind: dict[str, int] = {}
        self.first_reward_error: dict[str, Any] | None = None
        self._step_rewards: dict[int, list[dict[str, Any]]] = {}
        self._eval_records: list[dict[str, Any]] = []
        """Held-out records waiting for the backend's next eval summary, in log order."""
        self.reward_records_stepless = 0
        """Reward-log records with neither a step nor the eval tag (OpenRLHF, NeMo RL, rows that are not unirl's)."""
        self.reward_records_unidentified = 0
        """Of those, records whose row metadata did not identify a row of unirl's files (``row_unidentified``)."""
        self.late_values = 0
        """Native values that arrived after their step's row was written (left out of it, counted in the summary)."""
        self.latencies: list[float] = []
        """Seconds from a native metric's write (its TensorBoard wall time) to its row (for the benchmark)."""

    # --- reading --------------------------------------------------------------------------------------------------

    def poll(self) -> int:
        """Read what the backend appended since the last poll; write every step that is complete; return how many
        rows were written."""
        self._discover()
        for tail in self._jsonl.values():
            for line in tail.read():
                self._verl_line(line)
        for reader in self._events.values():
            for scalar in reader.read():
                self._native(scalar.tag, scalar.step, scalar.value, complete=False, wall_time=scalar.wall_time)
        self._read_rewards()
        return self._emit(final=False)

    def drain(self) -> int:
        """The last read, after the backend ended: every step still pending is written, complete or not."""
        self.poll()
        return self._emit(final=True)

    def _discover(self) -> None:
        native = self.run_dir / NATIVE_DIR
        if native.is_dir():
            pattern = VERL_FILE_PATTERN if self.attempt is None else verl_metrics_file(self.attempt)
            for path in sorted(native.glob(pattern)):
                self._jsonl.setdefault(path, JsonlTail(path))
        # verl's file logger holds every metric its TensorBoard copy would (one Tracking.log, two backends), at
        # float64: with a file log, verl's event files are not read.
        if self._jsonl:
            self._events.clear()
        for root in () if self._jsonl else (native, self.run_dir / NEMO_RL_LOG_DIR):
            for path in event_files(root):
                if path not in self._events:
                    self._events[path] = EventFileReader(path, self.use_tensorboard)
        if self._rewards is None and (self.run_dir / PLAIN).exists():
            # A compressed log (logging.trajectories_compress) is gzip members: counted by the scorers' own summaries
            # only, not followed here.
            self._rewards = JsonlTail(self.run_dir / PLAIN)

    def _verl_line(self, line: dict[str, Any]) -> None:
        step, data = line.get("step"), line.get("data")
        if not isinstance(step, int) or not isinstance(data, dict):
            return
        for name, value in data.items():
            self._native(str(name), step, value, complete=True)
        if step in self._steps:
            self._steps[step].complete = True

    def _native(self, name: str, step: int, value: Any, complete: bool, wall_time: float | None = None) -> None:
        if name in self.vocab.skip or isinstance(value, bool):
            return
        if value is None:
            value = math.nan  # verl's file logger writes NaN as null (orjson)
        if not isinstance(value, int | float):
            return
        unirl_step = self.vocab.unirl_step(name, step, self.recipe)
        if unirl_step in self._emitted:
            self.late_values += 1  # its row is written already: one row per step, so this value is only counted
            return
        axis = self.vocab.axis(name)
        self._axis_max[axis] = max(self._axis_max.get(axis, unirl_step), unirl_step)
        entry = self._steps.get(unirl_step)
        if entry is None:
            entry = self._steps[unirl_step] = _Step(first_seen=time.time())
        if wall_time:
            entry.first_seen = min(entry.first_seen, wall_time)
        if self.vocab.is_eval(name):
            entry.evals[name] = float(value)
        else:
            entry.values.setdefault(name, []).append(float(value))
        entry.complete = entry.complete or complete

    def _read_rewards(self) -> None:
        if self._rewards is None:
            return
        for record in self._rewards.read():
            self.reward_calls += 1
            found, named = record.get("errors"), record.get("error_kinds")
            errors: dict[str, Any] = found if isinstance(found, dict) else {}
            kinds: dict[str, Any] = named if isinstance(named, dict) else {}
            for reward, message in errors.items():
                kind = str(kinds.get(reward, "exception"))
                self.reward_errors += 1
                self.reward_errors_by_kind[kind] = self.reward_errors_by_kind.get(kind, 0) + 1
                if self.first_reward_error is None:  # the shape unirl's summaries use (RewardStats.first_error)
                    self.first_reward_error = {"reward": str(reward), "kind": kind, "message": str(message)}
            step = record.get("step")
            if record.get("split") == EVAL_SPLIT:
                self._eval_records.append(record)
            elif isinstance(step, int) and not isinstance(step, bool):
                self._step_rewards.setdefault(step, []).append(record)
            else:
                self.reward_records_stepless += 1
                self.reward_records_unidentified += bool(record.get("row_unidentified"))

    # --- writing --------------------------------------------------------------------------------------------------

    def _ready(self, step: int, entry: _Step) -> bool:
        if entry.complete:
            return True
        return all(self._axis_max.get(axis, -1) > step for axis in self.vocab.expected_axes)

    def _emit(self, final: bool) -> int:
        written = 0
        for step in sorted(self._steps):
            entry = self._steps[step]
            if not final and not self._ready(step, entry):
                break  # rows go out in step order
            del self._steps[step]
            written += self._write(step, entry)
        return written

    def _write(self, step: int, entry: _Step) -> int:
        if entry.evals:
            samples = self.eval_samples(self._take_validation())
            self.recorder.eval_done(step, self.eval_summary(entry.evals, samples), samples)
            self.evals += 1
        if not entry.values:
            return 0
        metrics: dict[str, float] = {}
        rewards = self._reward_columns(step)
        for name, values in entry.values.items():
            unirl_name = self.vocab.unirl_name(name)
            # where unirl's reward log gives the column, the backend's own number stays, as native/<its name>
            metrics[NATIVE_PREFIX + name if unirl_name in rewards else unirl_name] = _mean(values)
        metrics.update(rewards)
        self.recorder.metrics(step, metrics)
        if entry.first_seen:
            self.latencies.append(time.time() - entry.first_seen)
        self._emitted.add(step)
        self.rows += 1
        self.last_step = step if self.last_step is None else max(self.last_step, step)
        return 1

    def _reward_columns(self, step: int) -> dict[str, float]:
        """The step's reward columns from unirl's reward log, where its records say which step they scored."""
        records = self._step_rewards.pop(step, [])
        if not records:
            return {}
        # TRL's names and reductions (unirl/plugins/trl/runner.py METRIC_NAMES and UnirlCallback.on_log, trl 1.16
        # grpo_trainer.py:2820-2829): reward = nanmean of the totals, reward_std = nanstd with Bessel's correction
        # (trl/trainer/utils.py:1021-1043), rewards/<name>/mean = nanmean of that reward; the components and error
        # counts as unirl's TRL reward adapter logs them (unirl/adapters/trl.py: reward/<reward>/<component>,
        # reward/errors, reward/errors/<kind>).
        totals = _finite(r.get("total") for r in records)
        kinds: dict[str, int] = {}
        for record in records:
            for kind in (record.get("error_kinds") or {}).values():
                kinds[str(kind)] = kinds.get(str(kind), 0) + 1
        out: dict[str, float] = {"reward/errors": float(sum(len(r.get("errors") or {}) for r in records)),
                                 **{f"reward/errors/{k}": float(n) for k, n in sorted(kinds.items())}}
        if totals:
            out["reward/total/mean"] = statistics.fmean(totals)
            out["reward/total/std"] = statistics.stdev(totals) if len(totals) > 1 else math.nan
        by_name: dict[str, list[float]] = {}
        for record in records:
            for name, value in (record.get("scores") or {}).items():
                by_name.setdefault(f"reward/{name}/mean", []).extend(_finite([value]))
            for key, value in (record.get("components") or {}).items():
                by_name.setdefault(f"reward/{key}", []).extend(_finite([value]))
        out.update({key: statistics.fmean(values) if values else math.nan for key, values in by_name.items()})
        return out

    def _take_validation(self) -> list[dict[str, Any]]:
        """The waiting held-out records of one validation: in log order, up to the first repeat of a prompt."""
        taken: list[dict[str, Any]] = []
        seen: set[Any] = set()
        for record in self._eval_records:
            index = record.get("index")
            if index in seen:
                break
            seen.add(index)
            taken.append(record)
        del self._eval_records[:len(taken)]
        return taken

    def eval_samples(self, records: list[dict[str, Any]]) -> list[dict[str, Any]]:
        """eval.jsonl sample rows as TRL's eval writes them (unirl/plugins/trl/runner.py ``evaluate``): ``solved`` when
        ``eval.accuracy_reward`` scored >= ``eval.accuracy_threshold`` (a failed call counts 0)."""
        reward = accuracy_reward(self.recipe)
        threshold = float((self.recipe.get("eval") or {}).get("accuracy_threshold", 1.0))
        out = []
        for r in records:
            value = (r.get("scores") or {}).get(reward) if reward else None
            solved = (value if isinstance(value, int | float) and math.isfinite(value) else 0.0) >= threshold
            out.append({"prompt": r.get("prompt"), "completion": r.get("completion"), "reference": r.get("reference"),
                        "solved": solved, "total": r.get("total"), "scores": r.get("scores") or {},
                        "components": r.get("components") or {}, "errors": r.get("errors") or {},
                        "index": r.get("index"), "data_source": r.get("data_source")})
        return out

    def eval_summary(self, evals: dict[str, float], samples: list[dict[str, Any]] | None = None) -> dict[str, Any]:
        """An eval.jsonl summary row. With the validation's samples from unirl's reward log (:meth:`eval_samples`):
        n, solved, accuracy and the mean total as TRL's eval computes them (``accuracy_from: reward_log``); without:
        accuracy by ``eval.accuracy_reward`` where the backend logs it per reward and the backend's mean reward
        (``accuracy_from: native``). Every native value is kept under ``native``."""
        native = dict(sorted(evals.items()))
        if samples:
            solved = sum(bool(s["solved"]) for s in samples)
            totals = _finite(s.get("total") for s in samples)
            return {"accuracy": solved / len(samples), "reward_mean": statistics.fmean(totals) if totals else math.nan,
                    "solved": solved, "n": len(samples),
                    "distinct_completions": len({s.get("completion") for s in samples}),
                    "accuracy_reward": accuracy_reward(self.recipe), "accuracy_from": "reward_log",
                    "source": self.backend, "native": native}
        accuracy = next((v for k, v in evals.items() if self.vocab.eval_accuracy
                         and self.vocab.eval_accuracy(k, self.recipe)), math.nan)
        mean_reward = next((v for k, v in evals.items() if self.vocab.eval_mean_reward
                            and self.vocab.eval_mean_reward(k)), math.nan)
        return {"accuracy": accuracy, "reward_mean": mean_reward, "solved": None, "n": None,
                "accuracy_reward": accuracy_reward(self.recipe), "accuracy_from": "native", "source": self.backend,
                "native": native}

    def summary(self) -> dict[str, Any]:
        """What the bridge saw, for the run's summary.json."""
        out: dict[str, Any] = {"steps_logged": self.rows, "last_step": self.last_step, "evals": self.evals,
                               "late_values": self.late_values,
                               # the log holds every failure but, with logging.trajectories_per_group, not every
                               # call: records, not calls
                               "reward_log_records": self.reward_calls, "reward_errors": self.reward_errors,
                               "reward_errors_by_kind": dict(self.reward_errors_by_kind),
                               "reward_log_records_stepless": self.reward_records_stepless,
                               "reward_log_records_unidentified": self.reward_records_unidentified,
                               "eval_records_unattached": len(self._eval_records),
                               "native_logs": sorted(str(p.relative_to(self.run_dir))
                                                     for p in [*self._jsonl, *self._events])}
        if self.first_reward_error is not None:
            out["first_reward_error"] = self.first_reward_error
        return out


def _finite(values: Any) -> list[float]:
    """The finite numbers among ``values`` (TRL's nanmean/nanstd leave NaN out; a failed call's score is None)."""
    return [float(v) for v in values
            if isinstance(v, int | float) and not isinstance(v, bool) and math.isfinite(v)]


def _mean(values: list[float]) -> float:
    finite = [v for v in values if math.isfinite(v)]
    if not finite:
        return values[-1]
    return finite[0] if len(finite) == 1 else statistics.fmean(finite)
