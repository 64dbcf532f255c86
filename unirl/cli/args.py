"""What every verb shares: its own argument parser, the overrides argument, the exit statuses, and the error line.

A verb's parser makes ``--help`` work and an unknown flag a usage error (exit 2) instead of a Hydra lexer crash.
"""

from __future__ import annotations

import argparse
import contextlib
import logging
import os
import sys
from collections.abc import Iterator
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


@contextlib.contextmanager
def results_stdout() -> Iterator[Any]:
    """A private handle on the real stdout; file descriptor 1 itself points at stderr meanwhile.

    Code a verb runs for the user (a reward or environment file at import, a reward or environment call) may print,
    or ``os.write(1, ...)``; none of it may corrupt the results a tool reads from stdout (``--json``). Reward worker
    processes already send their stdout to stderr.
    """
    try:
        real = sys.stdout.fileno() == 1
    except (AttributeError, OSError, ValueError):  # a captured stdout (a test, a notebook): nothing to protect
        real = False
    if not real:
        yield sys.stdout
        return
    sys.stdout.flush()
    saved = os.dup(1)
    os.dup2(2, 1)
    results = os.fdopen(os.dup(saved), "w", encoding="utf-8")
    try:
        yield results
    finally:
        with contextlib.suppress(OSError, ValueError):
            results.flush()
        results.close()
        sys.stdout.flush()
        os.dup2(saved, 1)
        os.close(saved)
