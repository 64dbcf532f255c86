"""The run's reward specification: which rewards, weights, arguments and error policy, as plain data.

The host builds it from the recipe; every adapter (inside TRL, verl, OpenRLHF, NeMo RL, slime, vime
processes, often in another interpreter) reads it back from a JSON file and imports each reward by its
reference. It also fixes the component keys, so all backends log the same columns.
"""

from __future__ import annotations

import contextlib
import hashlib
import importlib
import importlib.util
import json
import math
import os
import signal
import sys
import time
from dataclasses import asdict, dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

from unirl.errors import FieldError, UnirlError
from unirl.rewards.contract import RewardFunction

ON_ERROR_CHOICES = ("auto", "exclude", "fallback", "abort")
MAX_WORKERS = 256
MAX_TIMEOUT_S = 24 * 3600.0


@dataclass(frozen=True)
class RewardEntry:
    name: str
    ref: str  # "module:qualname"
    file: str | None = None  # the defining file, used when the module is not importable by name
    weight: float = 1.0
    kwargs: dict[str, Any] = field(default_factory=dict)
    components: tuple[str, ...] = ()
    kind: str = "sample"
    inline: bool = False
    """Scored in the caller's thread (a trusted reward, or one the recipe marked ``inline``); else in workers."""


@dataclass
class RewardPolicy:
    """How reward calls run and what a failure costs: the recipe's ``reward_policy`` group."""

    on_error: str = "auto"
    """What a sample with a failed reward call scores: exclude (no reward, TRL only), fallback
    (``fallback_score``), abort the run, or auto (exclude where the backend can drop a sample's reward,
    else fallback; ``unirl plan`` shows which). Failures are counted and logged in every case."""
    fallback_score: float = 0.0
    """The score a failed reward call gets under ``on_error=fallback``."""
    max_error_rate: float = 0.05
    """Abort the run when more than this fraction of the last ``error_window`` reward calls failed (checked from
    min_calls on)."""
    min_calls: int = 100
    """Reward calls before max_error_rate is checked, so one early failure does not abort."""
    error_window: int = 1000
    """How many of the most recent reward calls max_error_rate is measured over (a late burst of failures in a long
    run is not diluted by the early successes)."""
    timeout_s: float = 30.0
    """Per reward call, in seconds; an overrunning call's worker process is killed and the call counted failed."""
    workers: int = 2
    """Reward worker processes scoring in parallel, for every reward that does not score in the trainer's thread
    (trusted built-ins and rewards marked ``rewards[i].inline=true`` do)."""
    startup_timeout_s: float = 60.0
    """Seconds a reward worker may take to start and import the rewards; longer fails the run (an import that
    hangs), instead of waiting forever."""
    worker_memory_mb: float = 2048.0
    """A reward worker above this resident memory after a task is replaced (a leaking reward), one above twice this
    during a call is killed and the call counted as a ``memory`` error; 0 = no limit."""

    def resolved(self, can_exclude: bool) -> RewardPolicy:
        """The policy with ``auto`` decided for a backend that can (or cannot) leave a failed sample's reward out:
        its ``Capabilities.can_exclude_rewards``."""
        if self.on_error != "auto":
            return self
        return replace(self, on_error="exclude" if can_exclude else "fallback")

    def problems(self) -> list[FieldError]:
        found = []
        if self.on_error not in ON_ERROR_CHOICES:
            found.append(FieldError("reward_policy.on_error", self.on_error, f"one of {list(ON_ERROR_CHOICES)}"))
        if not math.isfinite(self.fallback_score):
            found.append(FieldError("reward_policy.fallback_score", self.fallback_score, "must be a finite number"))
        if not 0 <= self.max_error_rate <= 1:  # NaN fails this too
            found.append(FieldError("reward_policy.max_error_rate", self.max_error_rate, "must be in [0, 1]"))
        if self.min_calls < 1:
            found.append(FieldError("reward_policy.min_calls", self.min_calls, "must be >= 1"))
        if self.error_window < 1:
            found.append(FieldError("reward_policy.error_window", self.error_window, "must be >= 1 reward calls"))
        if not 0 < self.timeout_s <= MAX_TIMEOUT_S:
            found.append(FieldError("reward_policy.timeout_s", self.timeout_s,
                                    f"must be > 0 and at most {MAX_TIMEOUT_S:g} seconds"))
        if not 0 < self.startup_timeout_s <= MAX_TIMEOUT_S:
            found.append(FieldError("reward_policy.startup_timeout_s", self.startup_timeout_s,
                                    f"must be > 0 and at most {MAX_TIMEOUT_S:g} seconds"))
        if not 1 <= self.workers <= MAX_WORKERS:
            found.append(FieldError("reward_policy.workers", self.workers,
                                    f"must be between 1 and {MAX_WORKERS}: worker processes for rewards that do not "
                                    "score in the trainer's thread (to score a reward there, set rewards[i].inline="
                                    "true; trusted built-ins do it by themselves)"))
        if not (self.worker_memory_mb == 0 or 64 <= self.worker_memory_mb <= 2**20):  # NaN fails this too
            found.append(FieldError("reward_policy.worker_memory_mb", self.worker_memory_mb,
                                    "must be 0 (no limit) or between 64 and 1048576 MiB"))
        return found


@dataclass(frozen=True)
class RewardRuntimeSpec:
    rewards: tuple[RewardEntry, ...]
    policy: RewardPolicy = field(default_factory=RewardPolicy)
    trajectory_log: str | None = None
    """The run's trajectories.jsonl (or .jsonl.gz); adapters inside backend processes append scored samples to it."""
    trajectory_per_group: int | None = None
    """At most this many completions per prompt and batch go to the trajectory log (failures always do)."""

    @property
    def names(self) -> list[str]:
        return [r.name for r in self.rewards]

    def component_keys(self) -> list[str]:
        """The fixed ``<reward>/<component>`` keys every scored sample carries."""
        return [f"{r.name}/{c}" for r in self.rewards for c in r.components]

    def to_json(self) -> str:
        return json.dumps(asdict(self), indent=2, sort_keys=True)

    def write(self, path: Path) -> Path:
        path.write_text(self.to_json() + "\n", encoding="utf-8")
        return path

    @classmethod
    def from_dict(cls, data: dict[str, Any]) -> RewardRuntimeSpec:
        rewards = tuple(RewardEntry(**{**r, "components": tuple(r.get("components", ()))}) for r in data["rewards"])
        # A spec the host wrote is resolved already; "auto" here is a hand-written one: read permissively, the
        # backend's own check (check(can_exclude=...)) then refuses what it cannot do.
        spec = cls(rewards, RewardPolicy(**data.get("policy", {})).resolved(True), data.get("trajectory_log"),
                   data.get("trajectory_per_group"))
        spec.check()
        return spec

    @classmethod
    def read(cls, path: str | Path) -> RewardRuntimeSpec:
        try:
            return cls.from_dict(json.loads(Path(path).read_text(encoding="utf-8")))
        except FileNotFoundError as exc:
            raise UnirlError(f"reward specification {path} does not exist") from exc

    def check(self, *, can_exclude: bool = True, backend: str = "this backend") -> None:
        """The policy's values, and ``exclude`` only where the backend can exclude (its declared capability;
        ``backend`` names it in the refusal). Keyword-only: a backend name passed where the capability goes would
        read as true."""
        p = self.policy
        problems = p.problems()
        if problems:
            raise problems[0]
        if p.on_error == "exclude" and not can_exclude:
            raise FieldError("reward_policy.on_error", p.on_error,
                             f"fallback or abort on {backend}: it needs a number for every sample (exclude needs a "
                             "backend that can leave a failed sample's reward out; `unirl frameworks --json` shows "
                             "can_exclude_rewards)")
        names = self.names
        if len(set(names)) != len(names):
            raise FieldError("rewards", names, "each reward at most once")



def entry_for(fn: RewardFunction, weight: float = 1.0, kwargs: dict[str, Any] | None = None,
              inline: bool | None = None) -> RewardEntry:
    """The spec entry for a reward; ``inline`` None = in the caller's thread only when the reward is trusted."""
    kwargs = dict(kwargs or {})
    return RewardEntry(name=fn.name, ref=fn.ref, file=fn.file, weight=float(weight), kwargs=kwargs,
                       components=tuple(fn.components), kind=fn.kind,
                       inline=fn.is_trusted(kwargs) if inline is None else bool(inline))


_PROBE_OK = "unirl-reward-file-imported"
_PROBED: dict[tuple[str, int, int], None] = {}
_PROBE_POLL_S = 0.05  # how often the probe's memory is read: 50 ms of allocation is ~0.5 GB at most


def probe_reward_file(path: str, field_name: str, timeout_s: float, memory_mb: float) -> None:
    """Import ``path`` in a child interpreter; a FieldError naming ``field_name`` when that does not end cleanly:
    it raises, exits, crashes, takes longer than ``timeout_s`` or holds more than ``memory_mb`` MiB (0: no bound;
    ``reward_policy.worker_memory_mb``, since every reward worker imports the file too)."""
    import subprocess

    from unirl.process_tree import rss_mib

    file = Path(path).expanduser()
    if not file.is_file():
        raise FieldError(field_name, path, "an existing Python file")
    stat = file.stat()
    key = (str(file.resolve()), stat.st_mtime_ns, stat.st_size)
    if key in _PROBED:
        return
    code = ("import sys\nfrom unirl.rewards.spec import load_reward_file\nload_reward_file(sys.argv[1])\n"
            f"sys.stdout.write('\\n{_PROBE_OK}\\n'); sys.stdout.flush()\n")
    env_path = os.pathsep.join(p for p in sys.path if p)
    child = subprocess.Popen([sys.executable, "-c", code, str(file)], stdout=subprocess.PIPE, stderr=subprocess.PIPE,
                             stdin=subprocess.DEVNULL, env={**os.environ, "PYTHONPATH": env_path}, text=True,
                             errors="replace", start_new_session=True)
    deadline = time.monotonic() + timeout_s
    peak = 0.0
    try:
        while True:
            try:
                out, err = child.communicate(timeout=_PROBE_POLL_S)
                break
            except subprocess.TimeoutExpired:
                peak = max(peak, rss_mib(child.pid) or 0.0)
                if memory_mb and peak > memory_mb:
                    raise FieldError(field_name, path, f"a file whose import holds at most reward_policy."
                                     f"worker_memory_mb={memory_mb:g} MiB; importing it reached {peak:.0f} MiB "
                                     "and was stopped") from None
                if time.monotonic() > deadline:
                    raise FieldError(field_name, path, f"a file that imports within reward_policy.startup_timeout_s="
                                     f"{timeout_s:g} s; importing it did not finish (does it hang?)") from None
    finally:
        if child.poll() is None:
            with contextlib.suppress(OSError):
                os.killpg(child.pid, signal.SIGKILL)  # its own session: whatever it started at import goes too
            child.communicate()
    tail = "\n".join(err.strip().splitlines()[-6:])
    if child.returncode != 0:
        how = f"signal {-child.returncode}" if child.returncode < 0 else f"exit status {child.returncode}"
        raise FieldError(field_name, path, f"a file that imports cleanly; importing it ended the interpreter with "
                                           f"{how}" + (f":\n{tail}" if tail else ""))
    if not out.rstrip().endswith(_PROBE_OK):
        raise FieldError(field_name, path, "a file that imports cleanly; importing it exited the interpreter "
                                           "(sys.exit or os._exit at import, status 0)")
    _PROBED[key] = None


def load_reward_file(path: str | Path) -> ModuleType:
    """Import a local reward file (its ``@unirl.reward`` functions register) under a stable module name."""
    file = Path(path).expanduser().resolve()
    if not file.is_file():
        raise FieldError("rewards[].file", str(path), "an existing Python file")
    module_name = f"unirl_reward_file_{file.stem}_{hashlib.sha256(str(file).encode()).hexdigest()[:8]}"
    if module_name in sys.modules:
        return sys.modules[module_name]
    spec = importlib.util.spec_from_file_location(module_name, file)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[module_name] = module
    try:
        spec.loader.exec_module(module)
    except Exception:
        del sys.modules[module_name]
        raise
    return module


def load_reward(entry: RewardEntry) -> RewardFunction:
    """Import the reward an entry points at, by module name or, failing that, by its defining file."""
    module_name, _, qualname = entry.ref.partition(":")
    if module_name == "__main__":
        raise UnirlError(f"reward {entry.name!r} is defined in __main__, which worker processes cannot import; "
                         "move it into a module or a file named in the recipe, or score it in the caller's thread "
                         "(rewards[i].inline=true, or entry_for(..., inline=True))")
    try:
        module = importlib.import_module(module_name)
    except ModuleNotFoundError as exc:
        if entry.file is None or (exc.name != module_name.split(".")[0] and exc.name != module_name):
            raise
        module = load_reward_file(entry.file)
    obj: Any = module
    for part in qualname.split("."):
        obj = getattr(obj, part)
    if not isinstance(obj, RewardFunction):
        raise UnirlError(f"reward {entry.name!r}: {entry.ref} is a {type(obj).__name__}, not a @unirl.reward function")
    return obj
