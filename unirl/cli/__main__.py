"""``python -m unirl.cli``: the same as the ``unirl`` command."""

from unirl.cli.main import console

console()
