"""The ``unirl`` command: verbs are parsed first, everything else is a Hydra run or sweep.

    unirl [+]framework=NAME recipe=NAME [key=value ...]     one run
    unirl -m framework=trl,verl algorithm.lr=1e-6,3e-6       a Hydra multirun sweep
    unirl plan [--json] [--validate] [overrides ...]         print the native launch, run nothing
    unirl plugins | frameworks | rewards [--json]            what is installed

Hydra 1.3 accepts either ``+framework=X`` (group absent from the defaults) or ``framework=X``
(group in the defaults), never both; unirl keeps ``framework: trl`` in its defaults and rewrites
``+framework=X`` to ``framework=X`` before Hydra sees the command line, so both spellings work.
"""

from __future__ import annotations

import argparse
import os
import sys
import traceback
from pathlib import Path
from typing import Any

from unirl.errors import RecipeInvalid, UnirlError

VERBS = ("plan", "diff", "advise", "compare", "stop", "resume", "plugins", "frameworks", "rewards", "reward",
         "help")
GROUPS_WITH_DEFAULTS = ("framework", "scheduler", "recipe")
EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

HELP = """\
usage: unirl [VERB] [-m] [OVERRIDE ...]

Run RL post-training from one recipe on any installed backend.

  unirl recipe=grpo_math                         the embedded default (TRL, tiny model, CPU)
  unirl +framework=trl recipe=grpo_math          choose the backend (framework=trl works too)
  unirl recipe=./my_recipe.yaml seed=3           a recipe file of your own, with overrides
  unirl -m algorithm.lr=1e-4,3e-4 seed=0,1       a sweep (Hydra multirun, basic launcher)

verbs:
  plan [--json] [--validate] [OVERRIDE ...]      print what the backend will receive; run nothing
  diff A B [--json] [OVERRIDE ...]               one recipe on two backends, field by field
  advise [--gpus N] [--nodes N] [--model-size 7B] [--async] [--engine vllm|sglang|hf] [--json]
                                                 which backend fits a situation, and why
  compare MULTIRUN_DIR [--json]                  a sweep's members side by side (+ reward curves PNG)
  stop RUN_DIR                                   stop the run's job (local process, Ray job, Slurm job); a run
                                                 that ended, or a pid or job id not the run's, is refused
  resume RUN_DIR [--force] [OVERRIDE ...]        continue a run from its last complete checkpoint, with the
                                                 recipe it started with; --force accepts changed overrides
                                                 (recorded in manifest.json); a completed run is not rerun
  plugins [--json]                               loaded plugins: package, version, hooks
  frameworks [--json]                            backends, their capabilities, installed versions
  rewards [--json]                               registered reward functions and their sources
  reward test NAME... --samples F.jsonl [--file R.py] [--json]
                                                 score samples with rewards, before any training

overrides (Hydra grammar): key=value sets a recipe field (algorithm.lr=3e-4, rewards.0.weight=0.5);
group=option picks a config option (recipe=, framework=, scheduler=). Fields and their units:
`unirl plan --json` shows the whole composed recipe. Hydra's own flags (--cfg job, --info,
--hydra-help, hydra.run.dir=...) pass through.

config groups: {groups}
shell completion: eval "$(unirl --completion bash)"
environment: UNIRL_RUNS_DIR (default ./runs), UNIRL_DISABLE_PLUGIN_AUTOLOAD=1,
  UNIRL_PLUGINS=a,b, UNIRL_PLUGINS_BLOCK=a,b, UNIRL_PLUGIN_FILE=path (default ./unirlfile.py)
"""


def err(message: str) -> None:
    print(f"unirl: error: {message}", file=sys.stderr)


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
        if sep and key == "framework" and not value.startswith(("glob(", "choice(", "range(")):
            for name in value.split(","):
                if name.strip() not in frameworks:
                    raise UnknownName("framework", name.strip(), frameworks)
        out.append(f"{key}={value}" if sep else arg)
    return out


def _is_multirun(argv: list[str]) -> bool:
    return "-m" in argv or "--multirun" in argv


def _hydra_flags_only(argv: list[str]) -> bool:
    """Hydra informational flags (--cfg, --info, --hydra-help, -c) that do not run the task."""
    return any(a in ("--cfg", "-c", "--info", "-i", "--hydra-help", "--resolve", "--package", "-p") or
               a.startswith(("--cfg=", "--info=")) for a in argv)


# --- the run (inside Hydra) -----------------------------------------------------------------

_RESULTS: list[dict[str, Any]] = []


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

    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:  # a single run's main() holds it already (re-entrant); a sweep member takes its own here
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
    from unirl.recipe.compose import plan_recipe, to_recipe

    host = get_host()
    run_dir = Path(HydraConfig.get().runtime.output_dir)
    try:  # everything before launch: a problem here is the user's input, reported without a traceback
        recipe = to_recipe(cfg)
        plan = plan_recipe(host, recipe)
        framework = host.frameworks.get(plan.framework)
        if _is_sweep_member():  # a single run's inputs were read before Hydra started (main's preflight)
            from unirl.data.preflight import check_inputs

            problems = check_inputs(recipe)
            if problems:
                raise RecipeInvalid(problems)
        validate_once(host, plan)
        scheduler = host.schedulers.get(recipe.scheduler.get("name", "local"))
        if hasattr(scheduler, "check"):  # e.g. the cluster answers, before anything is written
            scheduler.check(dict(recipe.scheduler))
        plan = framework.prepare(plan, run_dir, host)
    except UnirlError as exc:
        err(str(exc))
        return _record({"state": "invalid", "error": str(exc), "run_dir": str(run_dir)})
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


def _hydra_main(argv: list[str], sweep_dir: Path | None = None) -> int:
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
    if "invalid" in states:
        return EXIT_USAGE
    if "interrupted" in states:
        return EXIT_INTERRUPTED
    return EXIT_FAILED if any(s not in ("completed", "submitted") for s in states) else EXIT_OK


def preflight(host: Any, overrides: list[str], *, inputs: bool = False, backend: bool = False) -> Any:
    """Compose, validate and plan without making a run directory: bad input fails before anything starts.

    ``inputs``: also read the head of every data file and the model's metadata; ``backend``: also run the
    backend's own validation of the plan. Every problem found at one stage is reported at once.
    """
    from unirl.recipe.compose import compose, plan_recipe, to_recipe

    recipe = to_recipe(compose(host, overrides))
    plan = plan_recipe(host, recipe)
    if inputs:
        from unirl.data.preflight import check_inputs

        problems = check_inputs(recipe)
        if problems:
            raise RecipeInvalid(problems)
    if backend:
        validate_once(host, plan)
    return plan


_VALIDATED: set[str] = set()


def validate_once(host: Any, plan: Any) -> None:
    """The backend's own validation of a plan (verl's takes seconds); a plan already validated here is not again."""
    key = plan.to_json()
    if key not in _VALIDATED:
        host.frameworks.get(plan.framework).validate(plan)
        _VALIDATED.add(key)


# --- verbs ----------------------------------------------------------------------------------


def verb_parser(verb: str, description: str) -> argparse.ArgumentParser:
    """A verb's own parser: --help works, an unknown flag is an error (exit 2) instead of a Hydra lexer crash."""
    return argparse.ArgumentParser(prog=f"unirl {verb}", description=description)


def overrides_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                        help="recipe overrides in Hydra's grammar (algorithm.lr=3e-4, recipe=NAME, +framework=verl)")


def cmd_plan(args: list[str]) -> int:
    from unirl.cli.report import print_plan
    from unirl.host.manager import get_host

    parser = verb_parser("plan", "Print what the backend will receive for a recipe; runs nothing.")
    parser.add_argument("--json", action="store_true", help="the whole LaunchPlan as JSON")
    parser.add_argument("--validate", action="store_true", help="also run the backend's own validation")
    overrides_argument(parser)
    ns = parser.parse_intermixed_args(args)
    host = get_host()
    plan = preflight(host, normalise(ns.overrides, host.frameworks.names()), inputs=ns.validate)
    if ns.validate:
        host.frameworks.get(plan.framework).validate(plan)
    if ns.json:
        print(plan.to_json())
    else:
        print_plan(plan, validated=ns.validate)
    return EXIT_OK


def cmd_diff(args: list[str]) -> int:
    from unirl.backend.diff import check_names, diff, print_diff
    from unirl.host.manager import get_host
    from unirl.recipe.compose import check, compose, to_recipe

    parser = verb_parser("diff", "One recipe on two backends, field by field, with their own defaults.")
    parser.add_argument("left", metavar="FRAMEWORK_A", help="a framework name")
    parser.add_argument("right", metavar="FRAMEWORK_B", help="another framework name")
    parser.add_argument("--json", action="store_true")
    overrides_argument(parser)
    ns = parser.parse_intermixed_args(args)
    host = get_host()
    check_names(host, [ns.left, ns.right])
    recipe = to_recipe(compose(host, normalise(ns.overrides, host.frameworks.names())))
    check(host, recipe)
    result = diff(host, recipe, ns.left, ns.right)
    if ns.json:
        import json

        print(json.dumps(result, indent=2, default=str))
    else:
        print_diff(result)
    return EXIT_OK


def cmd_advise(args: list[str]) -> int:
    from unirl.backend.advise import advise, parse_situation, print_advice
    from unirl.host.manager import get_host

    situation, as_json = parse_situation(args)
    result = advise(get_host(), situation)
    if as_json:
        import json

        print(json.dumps(result, indent=2, default=str))
    else:
        print_advice(result)
    return EXIT_OK


def cmd_compare(args: list[str]) -> int:
    from unirl.launch.sweep import compare, plot_curves, print_compare

    parser = verb_parser("compare", "A sweep's members side by side, plus compare.png with their reward curves.")
    parser.add_argument("sweep_dir", metavar="MULTIRUN_DIR", type=Path)
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_intermixed_args(args)
    try:
        rows = compare(ns.sweep_dir)
    except FileNotFoundError as exc:
        raise UnirlError(str(exc)) from None
    png = plot_curves(rows, ns.sweep_dir / "compare.png")
    if ns.json:
        import json

        print(json.dumps({"members": rows, "png": str(png) if png else None}, indent=2, default=str))
    else:
        print_compare(rows, png)
    return EXIT_OK if all(r["state"] == "completed" for r in rows) else EXIT_FAILED


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


def cmd_resume(args: list[str]) -> int:
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
        return main([*resume_overrides(run_dir), *ns.overrides])


def cmd_reward(args: list[str]) -> int:
    from unirl.cli import reward_test as reward_cli
    from unirl.host.manager import get_host

    if not args or args[0] != "test":
        parser = verb_parser("reward", "Work with reward functions before training.")
        parser.add_argument("subcommand", choices=["test"], help="test: score samples with rewards")
        parser.parse_args(args[:1])  # exits 2 naming the choices (or prints --help)
    return reward_cli.main(args[1:], get_host())


def cmd_list(verb: str, args: list[str]) -> int:
    from unirl.cli import report
    from unirl.host.manager import get_host

    descriptions = {"plugins": "Loaded plugins: package, version, hooks.",
                    "frameworks": "Backends, their capabilities, and the installed versions.",
                    "rewards": "Registered reward functions and where they come from."}
    parser = verb_parser(verb, descriptions[verb])
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_intermixed_args(args)
    host = get_host()
    {"plugins": report.print_plugins, "frameworks": report.print_frameworks, "rewards": report.print_rewards}[verb](
        host, as_json=ns.json)
    return EXIT_OK


def print_help() -> None:
    from unirl.host.manager import get_host
    from unirl.recipe.compose import shipped_recipes

    host = get_host()
    groups = (f"recipe={{{','.join(sorted(shipped_recipes()))}}} framework={{{','.join(host.frameworks.names())}}} "
              f"scheduler={{{','.join(host.schedulers.names())}}}")
    print(HELP.format(groups=groups))


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    try:
        if argv and argv[0] in ("-h", "--help", "help"):
            print_help()
            return EXIT_OK
        if argv and argv[0] == "--completion":
            from unirl.cli.completion import BASH

            print(BASH, end="")
            return EXIT_OK
        if argv and argv[0] == "__complete":  # the shell asks for candidates (see unirl.cli.completion)
            from unirl.cli.completion import candidates

            position, current, verb = [*argv[1:], "", "", ""][:3]
            print("\n".join(candidates(int(position or 1), current, verb)))
            return EXIT_OK
        if argv and argv[0] == "--version":
            from unirl import __version__
            print(f"unirl {__version__}")
            return EXIT_OK
        if argv and argv[0] in VERBS:
            verb, rest = argv[0], argv[1:]
            if verb == "plan":
                return cmd_plan(rest)
            if verb == "reward":
                return cmd_reward(rest)
            if verb == "diff":
                return cmd_diff(rest)
            if verb == "advise":
                return cmd_advise(rest)
            if verb in ("compare", "stop", "resume"):
                return {"compare": cmd_compare, "stop": cmd_stop, "resume": cmd_resume}[verb](rest)
            return cmd_list(verb, rest)
        from unirl.host.manager import get_host
        from unirl.recipe.compose import register_configs

        host = get_host()
        overrides = normalise(argv, host.frameworks.names())
        register_configs(host)  # Hydra composes (each sweep member too) only from what is registered
        from unirl.recipe.run_name import raw_problems

        name_problems = raw_problems(overrides)  # run.name=${...} where it is written, before Hydra resolves it
        if name_problems:
            raise RecipeInvalid(name_problems)
        plan = None
        if not _is_multirun(overrides) and not _hydra_flags_only(overrides):
            if "logging.progress=false" not in overrides:  # the backend's validation imports it: seconds
                print("unirl: checking the recipe, its data and model, and the backend's own validation",
                      file=sys.stderr, flush=True)
            plan = preflight(host, [a for a in overrides if not a.startswith("-")], inputs=True, backend=True)
        sweep_dir = None
        if _is_multirun(overrides) and not any(a.startswith("hydra.sweep.dir=") for a in overrides):
            # Named here, not by Hydra, so this process can read every member's outcome back afterwards.
            from datetime import datetime

            runs = Path(os.environ.get("UNIRL_RUNS_DIR", "runs")).resolve()
            sweep_dir = runs / "multirun" / datetime.now().strftime("%Y-%m-%d_%H-%M-%S-%f")
            overrides = [*overrides, f"hydra.sweep.dir={sweep_dir}"]
        elif _is_multirun(overrides):
            sweep_dir = Path(next(a for a in overrides if a.startswith("hydra.sweep.dir=")).split("=", 1)[1])
        from unirl.launch.run_lock import claim_run_directory

        # The run (or sweep) directory checked and locked before Hydra writes into it; held until the run ends.
        claim = claim_run_directory(overrides, plan, None if _hydra_flags_only(overrides) else sweep_dir,
                                    ["unirl", *argv])
        if claim.finished is not None:  # e.g. resuming a run that already completed: nothing to run again
            return claim.finished
        with claim:
            return _hydra_main(claim.overrides, sweep_dir)
    except RecipeInvalid as exc:
        err(str(exc))
        return EXIT_USAGE
    except UnirlError as exc:
        err(str(exc))
        return EXIT_USAGE
    except Exception as exc:
        from hydra.errors import HydraException
        from omegaconf.errors import OmegaConfBaseException

        if isinstance(exc, HydraException | OmegaConfBaseException):
            from unirl.recipe.config_errors import describe

            err(describe(exc))
            return EXIT_USAGE
        raise


def console() -> None:
    sys.exit(main())


if __name__ == "__main__":
    console()
