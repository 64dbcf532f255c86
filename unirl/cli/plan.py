"""``unirl plan [--json] [--validate] [OVERRIDE ...]``: what the backend will receive for a recipe; runs nothing, and
checks the data keys and local inputs as a run's preflight would (reading only heads; nothing asked of the hub)."""

from __future__ import annotations

import argparse
import logging
from typing import Any

from unirl.cli.args import EXIT_OK, overrides_argument, verb_parser
from unirl.errors import RecipeInvalid

log = logging.getLogger(__name__)


def cmd_plan(args: list[str]) -> int:
    from unirl.cli.explain import fields_help
    from unirl.cli.report import print_plan
    from unirl.cli.run import normalise, preflight
    from unirl.host.manager import get_host

    parser = verb_parser("plan", "Print what the backend will receive for a recipe; runs nothing.")
    parser.epilog, parser.formatter_class = fields_help(), argparse.RawDescriptionHelpFormatter  # the recipe's fields
    parser.add_argument("--json", action="store_true", help="the whole LaunchPlan as JSON")
    parser.add_argument("--validate", action="store_true", help="also run the backend's own validation")
    overrides_argument(parser)
    ns = parser.parse_intermixed_args(args)
    host = get_host()
    plan = preflight(host, normalise(ns.overrides, host.frameworks.names()), inputs=ns.validate)
    if ns.validate:
        host.frameworks.get(plan.framework).validate(plan)
    else:
        check_inputs_offline(plan.recipe)
    if ns.json:
        print(plan.to_json())
    else:
        print_plan(plan, validated=ns.validate)
    return EXIT_OK


def check_inputs_offline(recipe_dict: dict[str, Any]) -> None:
    """The cheap part of a run's preflight: the data sources' heads (their prompt and answer keys, train and eval),
    builtin data, local dataset folders and a local model's metadata; every problem at once as invalid input (exit
    2), before anything is written. Nothing is asked of the hub: a hub dataset is named as not checked."""
    from unirl.data.preflight import inspect_inputs
    from unirl.recipe.schema import recipe_from_dict

    report = inspect_inputs(recipe_from_dict(recipe_dict), network=False)
    if report.problems:
        raise RecipeInvalid(report.problems)
    for note in report.unchecked:
        log.info("%s", note)
