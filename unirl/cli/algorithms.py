"""``unirl algorithms [--json]``: each algorithm preset on each backend, mapped or refused with the reason."""

from __future__ import annotations

import json

from unirl.cli.args import EXIT_OK, verb_parser


def cmd_algorithms(args: list[str]) -> int:
    from unirl.host.algorithm_support import markdown, support_table
    from unirl.host.manager import get_host

    parser = verb_parser("algorithms", "Each algorithm preset (algorithm=NAME) on each backend: mapped, or refused "
                                       "with the reason, from the plugins' own mapping tables.")
    parser.add_argument("--json", action="store_true")
    ns = parser.parse_intermixed_args(args)
    host = get_host()
    rows = support_table(host)
    if ns.json:
        print(json.dumps([{"framework": r.framework, "algorithm": r.algorithm, "support": r.cell,
                           "refusals": [str(p) for p in r.refusals],
                           "refusals_without_kl": [str(p) for p in r.refusals_without_kl]} for r in rows], indent=2))
    else:
        print(markdown(rows, list(host.frameworks.names())))
    return EXIT_OK
