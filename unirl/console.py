"""Where unirl prints tables and reports (rich), for every layer that shows something to the user."""

from __future__ import annotations

from typing import Any

PIPE_WIDTH = 200  # piped output is read by tools and grep: never fold or cut a key there


def console(stderr: bool = False, file: Any = None) -> Any:
    """Where unirl prints. markup=False: run names, paths, prompts, completions and error messages are user text,
    and ``[/bogus]`` or ``[link=...]`` in them must print as written (rich would parse them as markup, crash on
    the first and render a hyperlink for the second). Styles are passed as ``style=``, never inside text.
    ``file``: a stream of the command's results other than ``sys.stdout`` (see ``unirl.cli.args.results_stdout``)."""
    from rich.console import Console

    term = Console(markup=False, highlight=False, emoji=False, stderr=stderr, file=file)
    return term if term.is_terminal else Console(width=PIPE_WIDTH, markup=False, highlight=False, emoji=False,
                                                 stderr=stderr, file=file)
