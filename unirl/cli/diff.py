"""``unirl diff FRAMEWORK_A FRAMEWORK_B [--json] [OVERRIDE ...]``: one recipe on two backends, field by field."""

from __future__ import annotations

from typing import Any

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
    parser.add_argument("--parity", action="store_true",
                        help="also compute each side's parity certificate (unirl parity; cached: ~10 s a side the "
                             "first time); without it, certificates already computed for this recipe are shown")
    overrides_argument(parser)
    ns = parser.parse_intermixed_args(args)
    host = get_host()
    check_names(host, [ns.left, ns.right])
    recipe = to_recipe(compose(host, normalise(ns.overrides, host.frameworks.names())))
    check(host, recipe)
    result = diff(host, recipe, ns.left, ns.right)
    result["parity"] = parity_of(host, recipe, [ns.left, ns.right], compute=ns.parity)
    if ns.json:
        import json

        print(json.dumps(result, indent=2, default=str))
    else:
        print_diff(result)
        print_parity(result["parity"])
    # A side that refuses the recipe is invalid input for that backend: the table is still shown (what it can be
    # compared on), but a script must not read the comparison as two runnable translations.
    refused = result["left"]["refused"] or result["right"]["refused"]
    return EXIT_USAGE if refused else EXIT_OK


def parity_of(host: Any, recipe: Any, names: list[str], *, compute: bool) -> dict[str, Any]:
    """Each side's parity certificate for the recipe: from the cache, or computed (``compute``); None for a side
    without one yet."""
    from unirl.backend.parity.run import cached_certificate, recipe_for_record, record_certificate
    from unirl.host.planning import spec_from_recipe

    rewards = spec_from_recipe(recipe, host.rewards, can_exclude=False)
    out: dict[str, Any] = {}
    for name in names:
        one = recipe_for_record(recipe, name, host.frameworks.get(name).options)
        out[name] = record_certificate(host, one, rewards, name) if compute else cached_certificate(
            host, one, rewards, name)
    return out


def print_parity(parity: dict[str, Any]) -> None:
    """One line per side: the certificate's verdicts (unirl parity has the numbers)."""
    from unirl.console import console

    out = console()
    for name, record in parity.items():
        if record is None:
            out.print(f"parity {name}: not computed for this recipe yet (unirl diff --parity, or unirl parity)",
                      markup=False, highlight=False)
        elif "error" in record:
            out.print(f"parity {name}: no certificate ({record['error']})", markup=False, highlight=False)
        else:
            verdicts = ", ".join(f"{r['quantity']} {r['verdict']}" for r in record.get("rows", [])
                                 if r["framework"] == name)
            missing = "; ".join(item["why"] for item in record.get("not_certified", []))
            out.print(f"parity {name}: {verdicts or 'not certified: ' + missing}", markup=False, highlight=False)
