"""The ``unirl`` command: argument parsing, one function per verb, and what is printed."""

from unirl.cli.main import console, main

__all__ = ["console", "main"]
