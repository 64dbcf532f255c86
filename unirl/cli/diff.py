"""``unirl diff FRAMEWORK_A FRAMEWORK_B [--json] [OVERRIDE ...]``: one recipe on two backends, field by field."""

from __future__ import annotations

from unirl.cli.args import EXIT_OK, EXIT_USAGE, overrides_argument, verb_parser


def cmd_diff(args: list[str]) -> int:
    from unirl.backend.diff import check_names, diff, print_diff
    from unirl.cli.run import normalise
    from unirl.host.manager import get_host
    from unirl.host.planning import check, compose
    from unirl.recipe.compose import to_recipe

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
    # A side that refuses the recipe is invalid input for that backend: the table is still shown (what it can be
    # compared on), but a script must not read the comparison as two runnable translations.
    refused = result["left"]["refused"] or result["right"]["refused"]
    return EXIT_USAGE if refused else EXIT_OK
