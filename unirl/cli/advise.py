"""``unirl advise [--gpus N] [--nodes N] [--model-size 7B] [--async] [--engine E] [--json]``: which backend fits.

The situation's flags are parsed by :func:`unirl.backend.advise.parse_situation`; this module prints the advice.
"""

from __future__ import annotations

from unirl.cli.args import EXIT_OK


def cmd_advise(args: list[str]) -> int:
    from unirl.backend.advise import advise, parse_situation, print_advice
    from unirl.host.manager import get_host

    situation, as_json = parse_situation(args)
    result = advise(get_host(), situation)
    if as_json:
        import json

        print(json.dumps(result, indent=2, default=str))
    else:
        print_advice(result)
    return EXIT_OK
