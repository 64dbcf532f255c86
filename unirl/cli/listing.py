"""``unirl plugins | frameworks | rewards | environments [--json]``: what is installed (the tables are
:mod:`unirl.cli.report`'s)."""

from __future__ import annotations

from unirl.cli.args import EXIT_OK, verb_parser

DESCRIPTIONS = {"plugins": "Loaded plugins: package, version, hooks.",
                "frameworks": "Backends, their capabilities, and the installed versions.",
                "rewards": "Registered reward functions and where they come from.",
                "environments": "Registered multi-turn environments: source, tools, metrics."}


def cmd_plugins(args: list[str]) -> int:
    return _list("plugins", args)


def cmd_frameworks(args: list[str]) -> int:
    return _list("frameworks", args)


def cmd_rewards(args: list[str]) -> int:
    return _list("rewards", args)


def cmd_environments(args: list[str]) -> int:
    return _list("environments", args)


def _list(verb: str, args: list[str]) -> int:
    from unirl.cli import report
    from unirl.host.manager import get_host

    parser = verb_parser(verb, DESCRIPTIONS[verb])
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_intermixed_args(args)
    host = get_host()
    printers = {"plugins": report.print_plugins, "frameworks": report.print_frameworks,
                "rewards": report.print_rewards, "environments": report.print_environments}
    printers[verb](host, as_json=ns.json)
    return EXIT_OK
