"""``unirl import verl|openrlhf|trl NATIVE... [-o FILE]``: a recipe file from a backend's native configuration.

    unirl import verl run_qwen2-7b_math.sh -o math.yaml     a script's `python -m verl.trainer.main_ppo k=v ...` line
    unirl import verl data.train_batch_size=64 ...           the overrides themselves
    unirl import openrlhf train_grpo.sh | --flag value ...   a script's `train_ppo_ray` line, or the flags
    unirl import trl grpo_config.json                        GRPOConfig keyword arguments as a JSON object

A script is read, never run: the variables and arrays it sets before the command are expanded (``${N:-8}``,
``$((1024 * 2))``, ``${ARGS[@]}``); one it does not set stays as written unless ``--env NAME=VALUE`` gives it;
``--command N`` picks the N-th training command of a script that has several.

The recipe (YAML) goes to FILE or stdout; the report of what mapped to a recipe field, what stayed native
(``framework.overrides``) and what was dropped (paths, unirl's reward wiring) goes to stderr.
"""

from __future__ import annotations

import json
import sys
from pathlib import Path
from typing import Any

from unirl.cli.args import EXIT_OK, EXIT_USAGE, err
from unirl.errors import UnirlError

BACKENDS = ("verl", "openrlhf", "trl")
USAGE = ("usage: unirl import {verl,openrlhf,trl} NATIVE... [-o FILE] [--set FIELD=VALUE ...] [--env NAME=VALUE ...]"
         " [--command N]")


def read_native(backend: str, args: list[str], env: dict[str, str] | None = None, which: int | None = None
                ) -> tuple[dict[str, Any], list[tuple[str, str]], dict[str, str]]:
    """(native key -> value, tokens that were not imported with why, keys dropped by name with why); ``env``: values
    for the variables a script reads but does not set; ``which``: the command, where a script has several."""
    from unirl.backend.importing import hydra_values, openrlhf_flags, split_overrides, verl_command

    if backend == "verl":
        if len(args) == 1 and looks_like_a_file(args[0], "="):
            overrides, other = verl_command(read_input(args[0]), env, which)
        else:
            overrides, other = split_overrides(args)
        return hydra_values(overrides), other, {}
    if backend == "openrlhf":
        if len(args) == 1 and looks_like_a_file(args[0], "--"):
            args = [read_input(args[0])]
        flags, other = openrlhf_flags(args, env, which)
        return flags, other, {}
    if len(args) != 1:
        raise ValueError("trl takes one file: a Python script that builds a GRPOConfig or RLOOConfig, or a JSON "
                         "object of its keyword arguments")
    from unirl.backend.importing import trl_config_call

    if args[0].endswith(".py"):
        kwargs, skipped = trl_config_call(read_input(args[0]))
        return kwargs, skipped, {}
    # JSON, with "#" comment lines allowed (a fixture's header, say)
    text = "\n".join(line for line in read_input(args[0]).splitlines() if not line.lstrip().startswith("#"))
    try:
        kwargs = json.loads(text)
    except (ValueError, RecursionError) as exc:
        raise ValueError(f"{args[0]}: not JSON ({str(exc)[:120]})") from None
    if not isinstance(kwargs, dict):
        raise ValueError(f"{args[0]}: a JSON object of GRPOConfig keyword arguments")
    return kwargs, [], {}


def looks_like_a_file(arg: str, native_mark: str) -> bool:
    """One argument that is not native syntax (``key=value`` for verl, ``--flag`` for OpenRLHF) names a file; a
    file that is not there is refused (:func:`read_input`), never imported as an empty configuration."""
    if Path(arg).is_file():
        return True
    if native_mark == "=":  # verl: key=value, or ~key (a deletion)
        return "\n" not in arg and "=" not in arg and not arg.startswith("~")
    return "\n" not in arg and not arg.startswith(native_mark)


def read_input(path: str) -> str:
    """A script or config file's text: an existing file of at most ``MAX_SCRIPT_BYTES``, read as UTF-8."""
    from unirl.backend.importing import MAX_SCRIPT_BYTES

    file = Path(path)
    if not file.is_file():
        raise ValueError(f"{path}: no such file")
    size = file.stat().st_size
    if size > MAX_SCRIPT_BYTES:
        raise ValueError(f"{path}: {size:,} bytes; a launch script or config is read up to {MAX_SCRIPT_BYTES:,}")
    try:
        return file.read_text(encoding="utf-8")
    except UnicodeDecodeError as exc:
        raise ValueError(f"{path}: not UTF-8 text ({exc.reason} at byte {exc.start})") from None


def recipe_yaml(backend: str, document: dict[str, Any], source: str) -> str:
    import yaml

    head = (f"# Imported by `unirl import {backend}` from {source}.\n"
            f"# Run it: unirl framework={backend} recipe=./<this file>   (`unirl plan` shows what {backend} gets);\n"
            f"# native keys that no recipe field expresses are framework.overrides.\n")
    return head + yaml.safe_dump(document, sort_keys=False, default_flow_style=False)


def cmd_import(args: list[str]) -> int:
    import yaml

    from unirl.backend.importing import import_native

    args = list(args)
    output = None
    given: dict[str, Any] = {}
    while "--set" in args:  # recipe fields the native configuration does not hold: --set resources.gpus_per_node=8
        at = args.index("--set")
        name, eq, value = (args[at + 1] if at + 1 < len(args) else "").partition("=")
        if not eq:
            err("--set needs FIELD=VALUE (a recipe field the native configuration does not hold)")
            return EXIT_USAGE
        given[name] = yaml.safe_load(value)
        del args[at:at + 2]
    env: dict[str, str] = {}
    while "--env" in args:  # a variable the script reads but does not set: --env SLURM_JOB_NUM_NODES=1
        at = args.index("--env")
        name, eq, value = (args[at + 1] if at + 1 < len(args) else "").partition("=")
        if not eq or not name:
            err("--env needs NAME=VALUE (a shell variable the script reads but does not set)")
            return EXIT_USAGE
        env[name] = value
        del args[at:at + 2]
    which = None
    if "--command" in args:
        at = args.index("--command")
        text = args[at + 1] if at + 1 < len(args) else ""
        if not text.isdigit() or int(text) < 1:
            err("--command needs N, the 1-based training command of the script")
            return EXIT_USAGE
        which = int(text)
        del args[at:at + 2]
    for flag in ("-o", "--output"):
        if flag in args:
            at = args.index(flag)
            if at + 1 >= len(args):
                err(f"{flag} needs a file name")
                return EXIT_USAGE
            output = args[at + 1]
            del args[at:at + 2]
    if not args or args[0] in ("-h", "--help"):
        print(USAGE)
        print(__doc__.split("\n\n")[1])
        return EXIT_OK if args else EXIT_USAGE
    backend, native_args = args[0], args[1:]
    if backend not in BACKENDS:
        err(f"cannot import {backend!r}: one of {', '.join(BACKENDS)}")
        return EXIT_USAGE
    if not native_args:
        err(USAGE)
        return EXIT_USAGE
    try:
        native, other, dropped = read_native(backend, native_args, env, which)
    except (ValueError, OSError, UnirlError, RecursionError) as exc:
        err(str(exc) or type(exc).__name__)
        return EXIT_USAGE
    from unirl.backend.importing import CONFIG_CLASS_KEY, effective_runs, names_data
    from unirl.host.manager import get_host

    config_class = str(native.pop(CONFIG_CLASS_KEY, "GRPOConfig")) if backend == "trl" else None
    if config_class == "RLOOConfig":  # RLOOTrainer: the leave-one-out preset is what its config cannot say
        from unirl.recipe.algorithm_presets import preset_fields

        given = {**{f"algorithm.{k}": v for k, v in preset_fields("rloo").items()}, **given}
    elif config_class not in (None, "GRPOConfig"):
        err(f"{CONFIG_CLASS_KEY}={config_class!r}: one of GRPOConfig, RLOOConfig")
        return EXIT_USAGE
    host = get_host()
    imported = import_native(host.frameworks.get(backend), native, host.rewards.names(), dropped, given)
    source = native_args[0] if len(native_args) == 1 else "the command line"
    text = recipe_yaml(backend, imported.document(), source)
    if output:
        Path(output).write_text(text)
    else:
        sys.stdout.write(text)
    report = imported.report.text()
    if other:
        report += f"\nnot imported from the command line ({len(other)}):\n" + "\n".join(
            f"  {token}: {why}" for token, why in other)
    if not names_data(host.frameworks.get(backend), native):
        data = imported.recipe.data.train
        report += (f"\ndata: the {'configuration' if backend == 'trl' else 'command'} names no training data, so the "
                   f"recipe trains on unirl's default ({data}); name yours with --set data.train=FILE (.jsonl, "
                   ".json, .parquet; a list of them) or hf:<dataset>@<split>, and data.prompt_key / "
                   "data.answer_key for its columns")
    runs = effective_runs(host.frameworks.get(backend), native, imported.recipe, config_class)
    if runs is not None:
        report += "\n" + runs_text(backend, *runs)
    print(report, file=sys.stderr)
    return EXIT_OK


def runs_text(backend: str, command: Any, plan: Any) -> str:
    """The effective runs of the command and of the imported recipe's plan, as the backend executes them."""
    differences = command.differences(plan)
    length = (f"{command.steps} steps" if command.steps is not None else
              f"{command.epochs} passes over the data" + (f" (at most {command.step_cap} steps)"
                                                           if command.step_cap else ""))
    head = (f"the run {backend} executes: {length} of {command.prompts_per_step} prompts x "
            f"{command.samples_per_prompt} completions, {command.updates_per_step} optimizer updates a step")
    if not differences:
        return f"{head}; the imported recipe's plan runs the same (the same run length, batch, tokens, schedule " \
               "and algorithm)"
    lines = [f"{head}; the imported recipe's plan differs in ({len(differences)}):"]
    lines += [f"  {what}: the command {mine!r}, the plan {theirs!r}" for what, mine, theirs in differences]
    return "\n".join(lines)
