"""The default verb, ``unirl [-m] [OVERRIDE ...]``: one run, or a Hydra multirun sweep.

Owns everything between the command line and the scheduler: argv normalisation (``+framework=X`` is
``framework=X``; recipe files registered; an unknown framework refused before Hydra loads), the preflight that
composes, validates and plans without making a run directory, claiming and locking the run (or sweep) directory,
Hydra's task function, and the exit status summarising every run's outcome.

Hydra 1.3 accepts either ``+framework=X`` (group absent from the defaults) or ``framework=X``
(group in the defaults), never both; unirl keeps ``framework: trl`` in its defaults and rewrites
``+framework=X`` to ``framework=X`` before Hydra sees the command line, so both spellings work.
"""

from __future__ import annotations

import logging
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from unirl.cli.args import EXIT_FAILED, EXIT_INTERRUPTED, EXIT_OK, EXIT_USAGE, err
from unirl.errors import RecipeInvalid, UnirlError

GROUPS_WITH_DEFAULTS = ("framework", "scheduler", "recipe")

log = logging.getLogger(__name__)


def cmd_run(argv: list[str]) -> int:
    """One run or a sweep: checked before Hydra starts, its directory claimed, then Hydra runs :func:`_run_task`.

    unirl's messages from before Hydra starts (the preflight, claiming the directory) are kept and written to the
    single run's ``cli.log`` once Hydra has opened it (:func:`_replay_early`)."""
    logger = logging.getLogger("unirl")
    _EARLY.records.clear()
    logger.addHandler(_EARLY)
    try:
        return _cmd_run(argv)
    finally:
        logger.removeHandler(_EARLY)
        _EARLY.records.clear()


def _cmd_run(argv: list[str]) -> int:
    from unirl.host.manager import get_host
    from unirl.host.planning import register_configs

    host = get_host()
    overrides = normalise(argv, host.frameworks.names())
    register_configs(host)  # Hydra composes (each sweep member too) only from what is registered
    from unirl.recipe.run_name import raw_problems

    name_problems = raw_problems(overrides)  # run.name=${...} where it is written, before Hydra resolves it
    if name_problems:
        raise RecipeInvalid(name_problems)
    plan = None
    composed_dir = None
    if not is_multirun(overrides) and not hydra_flags_only(overrides):
        if "logging.progress=false" not in overrides:  # the backend's validation imports it: seconds
            log.info("checking the recipe, its data and model, and the backend's own validation")
        single = [a for a in overrides if not a.startswith("-")]
        plan = preflight(host, single, inputs=True, backend=True)
        from unirl.host.planning import composed_run_dir

        composed_dir = composed_run_dir(single)
    sweep_dir = None
    if is_multirun(overrides) and not any(a.startswith("hydra.sweep.dir=") for a in overrides):
        # Named here, not by Hydra, so this process can read every member's outcome back afterwards.
        from datetime import datetime

        runs = Path(os.environ.get("UNIRL_RUNS_DIR", "runs")).resolve()
        sweep_dir = runs / "multirun" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
        overrides = [*overrides, f"hydra.sweep.dir={sweep_dir}"]
    elif is_multirun(overrides):
        sweep_dir = Path(next(a for a in overrides if a.startswith("hydra.sweep.dir=")).split("=", 1)[1])
    from unirl.launch.run_lock import claim_run_directory

    # The run (or sweep) directory checked and locked before Hydra writes into it; held until the run ends.
    claim = claim_run_directory(overrides, plan, None if hydra_flags_only(overrides) else sweep_dir,
                                ["unirl", *argv], framework=host.frameworks.get(plan.framework) if plan else None,
                                scheduler_named=host.schedulers.find, run_dir=composed_dir)
    if claim.finished is not None:  # e.g. resuming a run that already completed: nothing to run again
        return claim.finished
    with claim:
        log.debug("starting Hydra with %s", " ".join(claim.overrides))
        return hydra_main(claim.overrides, sweep_dir)


# --- argv normalisation ---------------------------------------------------------------------


def normalise(argv: list[str], frameworks: list[str]) -> list[str]:
    """Rewrite ``+group=`` to ``group=`` for groups in the defaults, register recipe files, and reject
    an unknown framework here, before Hydra or any backend loads."""
    from unirl.errors import UnknownName
    from unirl.recipe.compose import register_recipe_file

    out = []
    for arg in argv:
        key, sep, value = arg.partition("=")
        bare = key.lstrip("+")
        if sep and bare in GROUPS_WITH_DEFAULTS and key.startswith("+") and not key.startswith("++"):
            key = bare
        if sep and key == "recipe" and value.endswith((".yaml", ".yml")):
            path = Path(value).expanduser()
            if not path.is_file():
                raise UnirlError(f"recipe={value!r}: no such recipe file")
            value = register_recipe_file(path)
            log.debug("recipe file %s registered as recipe=%s", path, value)
        if sep and key == "framework" and not value.startswith(("glob(", "choice(", "range(")):
            for name in value.split(","):
                if name.strip() not in frameworks:
                    raise UnknownName("framework", name.strip(), frameworks)
        out.append(f"{key}={value}" if sep else arg)
    return with_real_defaults(out)


REAL_MODEL_RECIPE = "base"
"""The recipe composed when a command names its own model or data but no recipe: the schema's defaults for a real
model (recipes/base.yaml), not the embedded toy's (recipes/grpo_math.yaml)."""


def with_real_defaults(argv: list[str]) -> list[str]:
    """``argv`` plus ``recipe=base`` when it sets a non-builtin ``model.path`` or ``data.train`` and names no recipe:
    the toy's learning rate, schedule, token budget and shaping rewards belong to the toy recipe alone."""
    keys = {a.partition("=")[0].lstrip("+"): a.partition("=")[2] for a in argv if "=" in a}
    if "recipe" in keys:
        return argv
    own = [k for k in ("model.path", "data.train") if k in keys and not keys[k].startswith("builtin:")]
    if not own:
        return argv
    log.info("no recipe= with %s: unirl's defaults for a real model (recipe=%s), not the embedded toy's settings "
             "(recipe=grpo_math)", " and ".join(f"{k}={keys[k]}" for k in own), REAL_MODEL_RECIPE)
    return [*argv, f"recipe={REAL_MODEL_RECIPE}"]


def is_multirun(argv: list[str]) -> bool:
    return "-m" in argv or "--multirun" in argv


def hydra_flags_only(argv: list[str]) -> bool:
    """Hydra informational flags (--cfg, --info, --hydra-help, -c) that do not run the task."""
    return any(a in ("--cfg", "-c", "--info", "-i", "--hydra-help", "--resolve", "--package", "-p") or
               a.startswith(("--cfg=", "--info=")) for a in argv)


# --- before the run -------------------------------------------------------------------------


def preflight(host: Any, overrides: list[str], *, inputs: bool = False, backend: bool = False) -> Any:
    """Compose, validate and plan without making a run directory: bad input fails before anything starts.

    ``inputs``: also read the head of every data file and the model's metadata; ``backend``: also run the
    backend's own validation of the plan. Every problem found at one stage is reported at once.
    """
    from unirl.host.planning import compose, plan_recipe
    from unirl.recipe.compose import to_recipe

    plan = plan_recipe(host, to_recipe(compose(host, overrides)))
    log.debug("planned a %s run: %s", plan.framework, " ".join(plan.command))
    if inputs:
        from unirl.data.preflight import check_inputs
        from unirl.recipe.schema import recipe_from_dict

        problems = check_inputs(recipe_from_dict(plan.recipe))  # as the backend resolved it (its auto fields)
        if problems:
            raise RecipeInvalid(problems)
    if backend:
        from unirl.launch.scheduler import check_plan_fits

        check_local_gpus(plan)
        validate_once(host, plan)
        check_plan_fits(host.schedulers.get(plan.recipe.get("scheduler", {}).get("name") or "local"), plan)
    return plan


def check_local_gpus(plan: Any) -> None:
    """A run on this machine needs the GPUs its plan expects here: refused before any run directory exists (a
    cluster scheduler's nodes are checked where the job lands)."""
    from unirl.backend.auto import LOCAL_SCHEDULERS
    from unirl.backend.environment import check_gpus

    if plan.recipe.get("scheduler", {}).get("name") in LOCAL_SCHEDULERS:
        check_gpus(plan.framework, plan.environment,
                   assumed=any(a.field == "resources.gpus_per_node" for a in plan.auto))


_VALIDATED: set[str] = set()


def validate_once(host: Any, plan: Any) -> None:
    """The backend's own validation of a plan (verl's takes seconds); a plan already validated here is not again."""
    key = plan.to_json()
    if key not in _VALIDATED:
        host.frameworks.get(plan.framework).validate(plan)
        _VALIDATED.add(key)
        log.debug("%s validated the plan", plan.framework)


# --- the run (inside Hydra) -----------------------------------------------------------------

_RESULTS: list[dict[str, Any]] = []


class _EarlyRecords(logging.Handler):
    """unirl's records from before Hydra set up the run's logging, for its ``cli.log``."""

    def __init__(self) -> None:
        super().__init__()
        self.records: list[logging.LogRecord] = []

    def emit(self, record: logging.LogRecord) -> None:
        self.records.append(record)


_EARLY = _EarlyRecords()


def _replay_early() -> None:
    """A single run's messages from before Hydra started, into the log file Hydra's job logging opened (cli.log);
    a sweep's belong to no one member. From here on, records reach that file themselves."""
    logging.getLogger("unirl").removeHandler(_EARLY)
    records, _EARLY.records = _EARLY.records, []
    if _is_sweep_member():
        return
    files = [h for h in logging.getLogger().handlers if isinstance(h, logging.FileHandler)]
    for record in records:
        for handler in files:
            if record.levelno >= handler.level:
                handler.handle(record)


def _record(outcome: dict[str, Any]) -> dict[str, Any]:
    """Remember each run's outcome, here and in its run directory: the process exit code summarises them all,
    and a sweep whose members ran in other processes (joblib, submitit) reads them back from ``outcome.json``."""
    _RESULTS.append(outcome)
    run_dir = Path(outcome["run_dir"])
    if run_dir.is_dir():
        from unirl.launch.sweep import OUTCOME
        from unirl.record.layout import write_json

        write_json(run_dir / OUTCOME, outcome)
    return outcome


def _run_task(cfg: Any) -> dict[str, Any]:
    """One run (or sweep member) holding its run directory's lock for the whole run (see unirl.launch.run_lock)."""
    from hydra.core.hydra_config import HydraConfig

    from unirl.launch.run_lock import acquire, command_line

    _replay_early()
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:  # a single run's cmd_run holds it already (re-entrant); a sweep member takes its own here
        lock = acquire(run_dir, command_line())
    except UnirlError as exc:
        err(str(exc))
        outcome = {"state": "invalid", "error": str(exc), "run_dir": str(run_dir)}
        _RESULTS.append(outcome)  # not _record: the directory belongs to the process holding its lock
        return outcome
    with lock:
        return _run_locked(cfg)


def _run_locked(cfg: Any) -> dict[str, Any]:
    from hydra.core.hydra_config import HydraConfig

    from unirl.host.manager import get_host
    from unirl.host.planning import plan_recipe, prepare_run
    from unirl.launch.scheduler import check_before_launch
    from unirl.recipe.algorithm_presets import GROUP as ALGORITHM_GROUP
    from unirl.recipe.algorithm_presets import apply_chosen_preset
    from unirl.recipe.compose import to_recipe
    from unirl.recipe.schema import recipe_from_dict

    host = get_host()
    hydra_config = HydraConfig.get()
    run_dir = Path(hydra_config.runtime.output_dir)
    try:  # everything before launch: a problem here is the user's input, reported without a traceback
        apply_chosen_preset(cfg, list(hydra_config.overrides.task), hydra_config.runtime.choices.get(ALGORITHM_GROUP))
        plan = plan_recipe(host, to_recipe(cfg))
        recipe = recipe_from_dict(plan.recipe)  # as the backend resolved it (its auto fields)
        if _is_sweep_member():  # a single run's inputs were read before Hydra started (cmd_run's preflight)
            from unirl.data.preflight import check_inputs

            problems = check_inputs(recipe)
            if problems:
                raise RecipeInvalid(problems)
        validate_once(host, plan)
        scheduler = host.schedulers.get(recipe.scheduler.get("name", "local"))
        # e.g. the cluster answers, the plan fits the scheduler's nodes: before anything is written
        check_before_launch(scheduler, dict(recipe.scheduler), plan)
        plan = prepare_run(host, plan, run_dir)
    except UnirlError as exc:
        err(str(exc))
        return _record({"state": "invalid", "error": str(exc), "run_dir": str(run_dir)})
    log.debug("submitting the %s run to the %s scheduler in %s", plan.framework, scheduler.name, run_dir)
    try:
        result = scheduler.submit(plan, run_dir, dict(recipe.scheduler))
    except KeyboardInterrupt:
        _record({"state": "interrupted", "run_dir": str(run_dir)})
        raise
    except Exception as exc:
        (run_dir / "error.log").write_text(traceback.format_exc())
        err(f"the run failed: {type(exc).__name__}: {exc}\n  traceback: {run_dir / 'error.log'}")
        _show_first_reward_failure(run_dir)
        return _record({"state": "failed", "error": f"{type(exc).__name__}: {exc}", "run_dir": str(run_dir)})
    outcome = {**result.summary, "state": result.state, "run_dir": str(run_dir), "job_id": result.job_id,
               "scheduler": scheduler.name, "exit_code": result.exit_code}
    if result.error:
        outcome["error"] = result.error
    _record(outcome)
    if result.state in ("completed", "submitted"):
        from unirl.cli.report import print_summary

        print_summary(outcome, run_dir)
    else:
        tail = "\n".join(result.log_tail.strip().splitlines()[-20:])
        err(f"the run {result.state}: {result.error or 'exit status ' + str(result.exit_code)}"
            + (f"\n--- last lines of the backend's output ---\n{tail}" if tail else "")
            + f"\n  run directory: {run_dir}")
        _show_first_reward_failure(run_dir, result.summary)
    return outcome


def _show_first_reward_failure(run_dir: Path, summary: dict[str, Any] | None = None) -> None:
    """A failed run names its first reward failure (reward, kind, traceback tail), if it had one."""
    from unirl.cli.report import first_reward_failure, print_first_reward_failure
    from unirl.launch.scheduler import read_summary

    summary = summary or read_summary(run_dir)
    print_first_reward_failure(summary.get("first_reward_error") or first_reward_failure(run_dir))


def _is_sweep_member() -> bool:
    from hydra.core.hydra_config import HydraConfig
    from hydra.types import RunMode

    return HydraConfig.get().mode == RunMode.MULTIRUN


def hydra_main(argv: list[str], sweep_dir: Path | None = None) -> int:
    """Hydra runs :func:`_run_task` for the run or each sweep member; the exit status summarises their outcomes."""
    import hydra

    from unirl.recipe.compose import CONFIG_MODULE

    _RESULTS.clear()
    app = hydra.main(version_base="1.3", config_path=f"pkg://{CONFIG_MODULE}", config_name="config")(_run_task)
    saved = sys.argv
    sys.argv = ["unirl", *argv]
    try:
        app()
    except KeyboardInterrupt:
        return EXIT_INTERRUPTED
    except Exception:  # the failure was reported by _run_task; the traceback is in the run directory's log
        return EXIT_FAILED
    finally:
        sys.argv = saved
    states = [r.get("state") for r in _RESULTS]
    if sweep_dir is not None:  # members that ran in other processes (joblib, submitit) left outcome.json files
        from unirl.launch.sweep import member_outcomes

        states = [m["state"] for m in member_outcomes(sweep_dir)] or states
        from unirl.cli.compare import print_sweep_end

        print_sweep_end(sweep_dir)  # the members side by side, and where they are
    if "invalid" in states:
        return EXIT_USAGE
    if "interrupted" in states:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if any(s not in ("completed", "submitted") for s in states) else EXIT_OK
