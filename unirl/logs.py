"""Where unirl's messages go: the ``unirl`` logger, its stderr handler, and the verbosity, set in one place.

Every module logs to its own ``logging.getLogger(__name__)`` (status lines at INFO, detail at DEBUG, problems at
WARNING and ERROR). Records of the ``unirl`` hierarchy are written to the current ``sys.stderr`` as users have
always seen them, ``unirl: message`` (a module may name itself otherwise through a ``prefix`` extra, e.g. ``unirl
reward server: ...``), and they propagate: during a run, Hydra's job logging (``unirl/recipe/conf/hydra/job_logging``)
writes them to the run directory's ``cli.log`` as well.

The verbosity is one setting: ``UNIRL_LOG_LEVEL`` (``DEBUG``, ``INFO``, ``WARNING``, ``ERROR`` or a number), which
``unirl -v`` / ``unirl -q`` set for the command and every process it starts (backends, reward workers); the
default is INFO. It decides what reaches stderr; a run's ``cli.log`` keeps INFO and above even under ``-q``.

stdlib only: this runs in every interpreter unirl's light core is staged into. :func:`configure` runs when unirl
is imported, so each process (the CLI, a backend's, a reward worker) shows unirl's messages without setup of its
own; an application that embeds unirl can remove the handler (``logging.getLogger("unirl").handlers``) or set the
level like any other logger's.
"""

from __future__ import annotations

import logging
import os
import sys

LEVEL_ENV = "UNIRL_LOG_LEVEL"
ROOT = "unirl"
NAMED_LEVELS = (logging.DEBUG, logging.INFO, logging.WARNING, logging.ERROR, logging.CRITICAL)
FILE_LEVEL = logging.INFO  # the least a run's cli.log records, whatever reaches the terminal


class StderrHandler(logging.Handler):
    """Writes to whatever ``sys.stderr`` is at the time of the record (a test, or a redirect, may replace it)."""

    def emit(self, record: logging.LogRecord) -> None:
        stream = sys.stderr
        if stream is None:  # pythonw, or a daemon with stderr closed: nowhere to say it
            return
        try:
            stream.write(self.format(record) + "\n")
            stream.flush()
        except RecursionError:
            raise
        except Exception:
            self.handleError(record)


class PlainFormatter(logging.Formatter):
    """``unirl: message``, the prefix taken from the record's ``prefix`` extra where a module sets one."""

    def format(self, record: logging.LogRecord) -> str:
        return f"{getattr(record, 'prefix', ROOT)}: {super().format(record)}"


def parse_level(value: str | int | None) -> int:
    """A level name or number as ``logging`` reads it; None, empty or unknown: INFO."""
    if isinstance(value, int):
        return value
    text = (value or "").strip()
    if text.lstrip("-").isdigit():
        return int(text)
    level = logging.getLevelName(text.upper()) if text else logging.INFO
    return level if isinstance(level, int) else logging.INFO


def level_from_env() -> int:
    return parse_level(os.environ.get(LEVEL_ENV))


class OncePerCommand(logging.Filter):
    """Drops a record logged with ``extra={"once": True}`` whose message this command has already said: a command
    checks its recipe more than once (the preflight, then the run) and a warning about the recipe is one warning."""

    def __init__(self) -> None:
        super().__init__()
        self.said: set[str] = set()

    def filter(self, record: logging.LogRecord) -> bool:
        if not getattr(record, "once", False):
            return True
        message = record.getMessage()
        if message in self.said:
            return False
        self.said.add(message)
        return True


def handler() -> StderrHandler | None:
    """unirl's own stderr handler on the ``unirl`` logger, if it has been installed."""
    return next((h for h in logging.getLogger(ROOT).handlers if isinstance(h, StderrHandler)), None)


def configure(level: str | int | None = None, *, inherit: bool = False) -> int:
    """The ``unirl`` logger writing to stderr at ``level`` (default: ``$UNIRL_LOG_LEVEL``, else INFO); idempotent.

    ``inherit``: also put the level in the environment, so that the processes this one starts use it too.
    Returns the level."""
    chosen = level_from_env() if level is None else parse_level(level)
    if inherit:
        name = logging.getLevelName(chosen)
        os.environ[LEVEL_ENV] = name if chosen in NAMED_LEVELS else str(chosen)
    logger = logging.getLogger(ROOT)
    current = handler()
    if current is None:
        current = StderrHandler()
        current.setFormatter(PlainFormatter())
        logger.addHandler(current)
    current.setLevel(chosen)
    logger.setLevel(min(chosen, FILE_LEVEL))
    for old in [f for f in current.filters if isinstance(f, OncePerCommand)]:
        current.removeFilter(old)  # each command (each configure) says its once-warnings afresh
    current.addFilter(OncePerCommand())  # on the handler: a logger's own filters never see its children's records
    return chosen


class NotUnirl(logging.Filter):
    """For Hydra's console handler: unirl's records already reach stderr through the ``unirl`` logger's handler."""

    def filter(self, record: logging.LogRecord) -> bool:
        return not (record.name == ROOT or record.name.startswith(ROOT + "."))
