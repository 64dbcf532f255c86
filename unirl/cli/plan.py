"""``unirl plan [--json] [--validate] [OVERRIDE ...]``: what the backend will receive for a recipe; runs nothing."""

from __future__ import annotations

import argparse

from unirl.cli.args import EXIT_OK, overrides_argument, verb_parser


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
    if ns.json:
        print(plan.to_json())
    else:
        print_plan(plan, validated=ns.validate)
    return EXIT_OK
