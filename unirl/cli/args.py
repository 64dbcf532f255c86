"""What every verb shares: its own argument parser, the overrides argument, the exit statuses, and the error line.

A verb's parser makes ``--help`` work and an unknown flag a usage error (exit 2) instead of a Hydra lexer crash.
"""

from __future__ import annotations

import argparse
import logging
from typing import Any

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

log = logging.getLogger("unirl.cli")  # the command's error line, whichever verb or module reports it


def err(message: str) -> None:
    """``unirl: error: MESSAGE`` on stderr (and in the run's cli.log while a run executes)."""
    log.error("error: %s", message, stacklevel=2)


def verb_parser(verb: str, description: str) -> argparse.ArgumentParser:
    """A verb's own parser: --help works, an unknown flag is an error (exit 2) instead of a Hydra lexer crash."""
    return argparse.ArgumentParser(prog=f"unirl {verb}", description=description)


def test_subcommand(verb: str, args: list[str], description: str, what: str) -> list[str]:
    """The arguments after ``unirl VERB test`` (``test`` is the verb's one subcommand); anything else exits 2 naming
    the choice, and ``--help`` prints the verb's help."""
    if not args or args[0] != "test":
        parser = verb_parser(verb, description)
        parser.add_argument("subcommand", choices=["test"], help=f"test: {what}")
        parser.parse_args(args[:1])
    return args[1:]


def json_object_flag(flag: str, text: str, allowed: str) -> dict[str, Any]:
    """A flag's JSON object value; a FieldError naming the flag (and ``allowed``) otherwise."""
    import json

    from unirl.errors import FieldError

    try:
        value = json.loads(text)
    except json.JSONDecodeError as exc:
        raise FieldError(flag, text, f"{allowed} ({exc.msg})") from None
    if not isinstance(value, dict):
        raise FieldError(flag, text, allowed)
    return value


def overrides_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                        help="recipe overrides in Hydra's grammar (algorithm.lr=3e-4, recipe=NAME, +framework=verl)")
