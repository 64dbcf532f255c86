"""The ``unirl`` command's dispatch: top-level flags, then a verb's module, else the default verb (a run or sweep).

    unirl [-v|-q] [+]framework=NAME recipe=NAME [key=value ...]     one run            (unirl.cli.run)
    unirl -m framework=trl,verl algorithm.lr=1e-6,3e-6               a sweep            (unirl.cli.run)
    unirl plan [--json] [--validate] [overrides ...]                 print the launch   (unirl.cli.plan)
    unirl plugins | frameworks | rewards [--json]                    what is installed  (unirl.cli.listing)

Each verb lives in its own module (:data:`VERBS`), imported only when it runs, so ``unirl --help`` and shell
completion stay light. This module owns the top-level flags (``--help``, ``--version``, ``--completion``,
``-v``/``-q``), the verbosity (:func:`unirl.logs.configure`), and turning what a verb raises for bad input into
``unirl: error: ...`` with exit status 2.
"""

from __future__ import annotations

import importlib
import logging
import sys
from collections.abc import Callable

from unirl.cli.args import EXIT_OK, EXIT_USAGE, err
from unirl.errors import UnirlError

# verb -> "module:function"; the function takes the verb's arguments and returns the exit status.
VERBS: dict[str, str] = {
    "plan": "unirl.cli.plan:cmd_plan",
    "diff": "unirl.cli.diff:cmd_diff",
    "parity": "unirl.cli.parity:cmd_parity",
    "advise": "unirl.cli.advise:cmd_advise",
    "explain": "unirl.cli.explain:cmd_explain",
    "compare": "unirl.cli.compare:cmd_compare",
    "show": "unirl.cli.show:cmd_show",
    "report": "unirl.cli.report_html:cmd_report",
    "stop": "unirl.cli.stop:cmd_stop",
    "resume": "unirl.cli.resume:cmd_resume",
    "plugins": "unirl.cli.listing:cmd_plugins",
    "frameworks": "unirl.cli.listing:cmd_frameworks",
    "rewards": "unirl.cli.listing:cmd_rewards",
    "algorithms": "unirl.cli.algorithms:cmd_algorithms",
    "reward": "unirl.cli.reward_test:cmd_reward",
    "environments": "unirl.cli.listing:cmd_environments",
    "env": "unirl.cli.env_test:cmd_env",
    "import": "unirl.cli.import_config:cmd_import",
    "help": "",  # print_help
}
VERBOSITY = {"-v": logging.DEBUG, "--verbose": logging.DEBUG, "-q": logging.WARNING, "--quiet": logging.WARNING}

log = logging.getLogger("unirl.cli.main")  # by name: under `python -m unirl.cli.main`, __name__ is "__main__"

HELP = """\
usage: unirl [-v | -q] [VERB] [-m] [OVERRIDE ...]

Run RL post-training from one recipe on any installed backend.

  unirl recipe=grpo_math                         the embedded default (TRL, tiny model, CPU)
  unirl +framework=trl recipe=grpo_math          choose the backend (framework=trl works too)
  unirl recipe=./my_recipe.yaml seed=3           a recipe file of your own, with overrides
  unirl -m algorithm.lr=1e-4,3e-4 seed=0,1       a sweep (Hydra multirun, basic launcher)

options (before the verb or overrides):
  -v, --verbose                                  also debug messages (what unirl composed, planned, submitted)
  -q, --quiet                                    only warnings and errors on stderr (a run's cli.log keeps
                                                 its status lines); the command's own output is unchanged

verbs:
  plan [--json] [--validate] [OVERRIDE ...]      print what the backend will receive; run nothing
  diff A B [--json] [OVERRIDE ...]               one recipe on two backends, field by field
  parity [--frameworks trl,verl,openrlhf] [--python NAME=PATH] [--json] [OVERRIDE ...]
                                                 each backend's own loss code on one frozen batch against the
                                                 recipe's meaning: equal, design, mismatch or refused
  advise [--gpus N] [--nodes N] [--model-size 7B] [--async] [--engine vllm|sglang|hf] [--json]
                                                 which backend fits a situation, and why
  explain FIELD [--json]                         one recipe field: meaning, unit, allowed values, default, and the
                                                 native key and default of every installed backend
  compare MULTIRUN_DIR [MULTIRUN_DIR ...] [--json]
                                                 sweeps' members side by side, seeds aggregated per
                                                 configuration (+ reward curves PNG)
  show RUN_DIR [--step N] [--worst|--best|--errors] [--prompt TEXT] [--limit K] [--json]
                                                 a run's scored completions by prompt: total, every reward
                                                 and component, reward errors
  report RUN_DIR|MULTIRUN_DIR [-o FILE]          one self-contained HTML page of a run or a sweep
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
  environments [--json]                          registered multi-turn environments: source, tools, metrics
  env test NAME --tasks T.jsonl --actions A.jsonl [--file E.py] [--json]
                                                 replay scripted assistant turns through an environment

overrides (Hydra grammar): key=value sets a recipe field (algorithm.lr=3e-4, rewards.0.weight=0.5);
group=option picks a config option (recipe=, framework=, scheduler=). Fields and their units:
`unirl plan --json` shows the whole composed recipe. Hydra's own flags (--cfg job, --info,
--hydra-help, hydra.run.dir=...) pass through.

config groups: {groups}
shell completion: eval "$(unirl --completion bash)"
messages: on stderr as "unirl: ...", and in each run directory's cli.log
environment: UNIRL_RUNS_DIR (default ./runs), UNIRL_DISABLE_PLUGIN_AUTOLOAD=1,
  UNIRL_PLUGINS=a,b, UNIRL_PLUGINS_BLOCK=a,b, UNIRL_PLUGIN_FILE=path (default ./unirlfile.py),
  UNIRL_LOG_LEVEL=DEBUG|INFO|WARNING|ERROR (what -v and -q set, for unirl and the processes it starts)
"""


def print_help() -> None:
    from unirl.host.manager import get_host
    from unirl.recipe.compose import shipped_recipes

    host = get_host()
    groups = (f"recipe={{{','.join(sorted(shipped_recipes()))}}} framework={{{','.join(host.frameworks.names())}}} "
              f"scheduler={{{','.join(host.schedulers.names())}}}")
    print(HELP.format(groups=groups))


def command(verb: str) -> Callable[[list[str]], int]:
    """The function that runs ``verb``, from its module (imported now, not when ``unirl`` starts)."""
    module, _, function = VERBS[verb].partition(":")
    found: Callable[[list[str]], int] = getattr(importlib.import_module(module), function)
    return found


def main(argv: list[str] | None = None) -> int:
    argv = list(sys.argv[1:] if argv is None else argv)
    level = None
    while argv and argv[0] in VERBOSITY:  # before the verb: `unirl -q plan`, `unirl -v recipe=x`; the last one counts
        level = VERBOSITY[argv.pop(0)]
    from unirl.logs import configure

    # This process and the ones it starts (backends, reward workers) log at the chosen level ($UNIRL_LOG_LEVEL).
    configure(level, inherit=level is not None)
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
            print("\n".join(candidates(int(position or 1), current, verb, [v for v in VERBS if v != "help"])))
            return EXIT_OK
        if argv and argv[0] == "--version":
            from unirl import __version__
            print(f"unirl {__version__}")
            return EXIT_OK
        if argv and argv[0] in VERBS:
            log.debug("verb %s, arguments: %s", argv[0], " ".join(argv[1:]) or "none")
            return command(argv[0])(argv[1:])
        from unirl.cli.run import cmd_run

        return cmd_run(argv)
    except UnirlError as exc:  # RecipeInvalid included: the user's input, reported without a traceback
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
