"""The ``unirl`` command for tests: in this process by default, as a real process where that is the point.

:func:`run_cli` calls :func:`unirl.cli.main.main` here, as a fresh ``unirl`` process would run it: the plugin host
and Hydra's global state new, the environment and working directory the call's own, file descriptors 1 and 2
captured (so a reward worker's or a backend child's output is caught as a pipe would catch it, and ``unirl reward
test`` protects its results exactly as in a terminal: ``sys.stdout.fileno()`` is 1), argparse's and Hydra's
``SystemExit`` turned into the exit status, and an exception ``main`` does not report itself printed as the
interpreter would print it, with status 1. Everything the call changed in this process is put back afterwards.
An interpreter start with unirl's imports costs about half a second a call; the suite makes hundreds.

:func:`run_console` runs the installed console script as its own process. Tests use it where the process is the
point (say why at the call): the console script itself, a process killed by a signal, a real pipe, an interpreter
whose start-up path is the thing under test.
"""

from __future__ import annotations

import contextlib
import importlib
import logging
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import threading
import traceback
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import IO, Any


@dataclass
class CliResult:
    """A finished ``unirl`` command, read like :class:`subprocess.CompletedProcess` in text mode."""

    args: list[str]
    returncode: int
    stdout: str
    stderr: str


def run_cli(*args: str, env: Mapping[str, str] | None = None, cwd: Path | str | None = None) -> CliResult:
    """``unirl ARGS`` in this process, as a fresh process would run it; ``env`` is added to the environment."""
    argv = [str(a) for a in args]
    if env and "PYTHONPATH" in env:
        raise ValueError("PYTHONPATH takes effect when an interpreter starts: use run_console for this call")
    with _call_state(env, cwd), _Captured() as captured:
        status = _call_main(argv)
    return CliResult(["unirl", *argv], status, captured.stdout, captured.stderr)


def console_script() -> Path:
    """The ``unirl`` console script pip installed next to this interpreter."""
    script = Path(sys.executable).parent / "unirl"
    if not script.exists():
        found = shutil.which("unirl")
        if found is None:
            from tests.support.helpers import missing

            missing("the unirl console script is not installed: pip install -e .")
        script = Path(found)
    return script


def run_console(*args: str, env: Mapping[str, str] | None = None, cwd: Path | str | None = None,
                timeout: float = 600) -> subprocess.CompletedProcess[str]:
    """``unirl ARGS`` as its own process, through the installed console script, as a user types it."""
    return subprocess.run([str(console_script()), *map(str, args)], capture_output=True, text=True,
                          env={**os.environ, **(env or {})}, cwd=cwd, timeout=timeout)


# --- the call -------------------------------------------------------------------------------------------------


def _call_main(argv: list[str]) -> int:
    from unirl.cli.main import main

    try:
        return main(argv)
    except SystemExit as exc:  # argparse's usage errors and --help; Hydra exits 1 after reporting a failure
        return _exit_status(exc.code)
    except Exception:  # main re-raises what it does not report: the interpreter prints it and exits 1
        traceback.print_exc()
        return 1


def _exit_status(code: object) -> int:
    """What the interpreter makes of ``sys.exit(code)``."""
    if code is None:
        return 0
    if isinstance(code, int):
        return code & 0xFF
    print(code, file=sys.stderr)
    return 1


@contextlib.contextmanager
def _call_state(env: Mapping[str, str] | None, cwd: Path | str | None) -> Iterator[None]:
    """A fresh process's view for one call, and this process as it was afterwards.

    Put back: the environment (the call's ``env``, and whatever the product set), the working directory,
    ``sys.argv`` and ``sys.path``, logging (Hydra configures the root logger for every run, with a file handler in
    the run directory that must not go on collecting later tests' records) and the signal handlers.
    """
    saved_env = dict(os.environ)
    saved_cwd = os.getcwd()
    saved_argv, saved_path = sys.argv[:], sys.path[:]
    saved_logging = _LoggingState()
    saved_signals = _signal_handlers()
    os.environ.update(env or {})
    if cwd is not None:
        os.chdir(cwd)
    _fresh_process()
    try:
        yield
    finally:
        _fresh_process()  # what the call built (its host, Hydra's state) is not the test's
        saved_logging.restore()
        for signum, handler in saved_signals.items():
            if signal.getsignal(signum) is not handler:
                signal.signal(signum, handler)
        sys.argv[:], sys.path[:] = saved_argv, saved_path
        os.chdir(saved_cwd)
        if dict(os.environ) != saved_env:
            os.environ.clear()
            os.environ.update(saved_env)


def _fresh_process() -> None:
    """The state a new ``unirl`` process starts with: no plugin host yet, Hydra not initialised, no plan validated."""
    from unirl.host.manager import reset_host

    reset_host()
    # Plans this process's backend validation passed (a fresh process has validated none).
    importlib.import_module("unirl.cli.run")._VALIDATED.clear()
    if "hydra" in sys.modules:
        from hydra.core.global_hydra import GlobalHydra

        GlobalHydra.instance().clear()


_SIGNALS = (signal.SIGINT, signal.SIGTERM, signal.SIGHUP, signal.SIGCHLD, signal.SIGALRM, signal.SIGPIPE,
            signal.SIGUSR1, signal.SIGUSR2)


def _signal_handlers() -> dict[int, Any]:
    if threading.current_thread() is not threading.main_thread():  # only the main thread may set them
        return {}
    return {s: signal.getsignal(s) for s in _SIGNALS}


class _LoggingState:
    """Every logger's handlers, filters, level and switches, to put back after Hydra's ``dictConfig``."""

    def __init__(self) -> None:
        self.loggers = self._all()
        self.saved = {name: (list(lg.handlers), list(lg.filters), lg.level, lg.propagate, lg.disabled)
                      for name, lg in self.loggers.items()}
        self.handlers = {h for lg in self.loggers.values() for h in lg.handlers}

    @staticmethod
    def _all() -> dict[str, logging.Logger]:
        found: dict[str, logging.Logger] = {"": logging.getLogger()}
        for name, logger in list(logging.Logger.manager.loggerDict.items()):
            if isinstance(logger, logging.Logger):
                found[name] = logger
        return found

    def restore(self) -> None:
        """Loggers that existed before the call as they were; those a library made during it are its own."""
        for name, logger in self.loggers.items():
            for handler in [h for h in logger.handlers if h not in self.handlers]:
                logger.removeHandler(handler)  # e.g. Hydra's file handler in the run directory: closed, not kept
                with contextlib.suppress(Exception):
                    handler.close()
            handlers, filters, level, propagate, disabled = self.saved[name]
            logger.handlers[:] = handlers
            logger.filters[:] = filters
            logger.setLevel(level)
            logger.propagate, logger.disabled = propagate, disabled


class _Captured:
    """File descriptors 1 and 2 (and ``sys.stdout``/``sys.stderr`` on them) captured into files for one call."""

    stdout = ""
    stderr = ""

    def __enter__(self) -> _Captured:
        for stream in (sys.stdout, sys.stderr):
            with contextlib.suppress(Exception):
                stream.flush()
        self.files = [tempfile.TemporaryFile(), tempfile.TemporaryFile()]
        self.saved_fds = [os.dup(1), os.dup(2)]
        self.saved_streams = (sys.stdout, sys.stderr)
        os.dup2(self.files[0].fileno(), 1)
        os.dup2(self.files[1].fileno(), 2)
        # As an interpreter opens them for pipes: stdout strict, stderr backslashreplace and line-buffered.
        sys.stdout = open(1, "w", encoding="utf-8", closefd=False)
        sys.stderr = open(2, "w", buffering=1, encoding="utf-8", errors="backslashreplace",
                          closefd=False)
        return self

    def __exit__(self, *exc: object) -> None:
        streams: tuple[IO[str], IO[str]] = (sys.stdout, sys.stderr)
        for stream in streams:
            with contextlib.suppress(Exception):
                stream.flush()
        sys.stdout, sys.stderr = self.saved_streams
        for fd, saved in zip((1, 2), self.saved_fds, strict=True):
            os.dup2(saved, fd)
            os.close(saved)
        self.stdout, self.stderr = (self._read(f) for f in self.files)

    @staticmethod
    def _read(file: IO[bytes]) -> str:
        with file:
            file.seek(0)
            return file.read().decode("utf-8", errors="replace")
