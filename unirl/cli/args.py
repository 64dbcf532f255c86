"""What every verb shares: its own argument parser, the overrides argument, the exit statuses, and the error line.

A verb's parser makes ``--help`` work and an unknown flag a usage error (exit 2) instead of a Hydra lexer crash.
"""

from __future__ import annotations

import argparse
import logging

EXIT_OK, EXIT_FAILED, EXIT_USAGE, EXIT_INTERRUPTED = 0, 1, 2, 130

log = logging.getLogger("unirl.cli")  # the command's error line, whichever verb or module reports it


def err(message: str) -> None:
    """``unirl: error: MESSAGE`` on stderr (and in the run's cli.log while a run executes)."""
    log.error("error: %s", message, stacklevel=2)


def verb_parser(verb: str, description: str) -> argparse.ArgumentParser:
    """A verb's own parser: --help works, an unknown flag is an error (exit 2) instead of a Hydra lexer crash."""
    return argparse.ArgumentParser(prog=f"unirl {verb}", description=description)


def overrides_argument(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("overrides", nargs="*", metavar="OVERRIDE",
                        help="recipe overrides in Hydra's grammar (algorithm.lr=3e-4, recipe=NAME, +framework=verl)")
