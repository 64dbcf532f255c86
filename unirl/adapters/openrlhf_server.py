"""The HTTP form of the OpenRLHF reward contract, for ``--reward.remote_url http://host:port/get_reward``.

    python -m unirl.adapters.openrlhf_server --spec reward_spec.json [--host 127.0.0.1] [--port 5000]

OpenRLHF POSTs ``{"query": [...], "prompts": [...], "labels": [...]}`` and reads ``rewards``, ``scores`` and
``extra_logs`` from the JSON answer (the shape of its own ``cli/serve_rm.py``). The server scores with the
same executor as the in-process adapter, so both forms give identical numbers. Standard library only.
When the recipe's policy aborts, the server answers 500 with the reason and shuts down: OpenRLHF's
requests then fail and the run stops, instead of training on made-up rewards.
"""

from __future__ import annotations

import argparse
import json
import os
import sys
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any

from unirl.adapters.common import SPEC_ENV
from unirl.adapters.openrlhf import score_queries
from unirl.reward_executor import RewardAbort


class RewardHandler(BaseHTTPRequestHandler):
    server_version = "unirl-reward/1"

    def do_POST(self) -> None:  # http.server's naming
        try:
            body = json.loads(self.rfile.read(int(self.headers.get("Content-Length") or 0)) or b"{}")
            queries, prompts = body["query"], body.get("prompts")
            labels = body.get("labels") or [""] * len(queries)
            answer = score_queries(queries, prompts if prompts is not None else [""] * len(queries), labels)
        except RewardAbort as exc:
            self._reply(500, {"error": str(exc)})
            print(f"unirl reward server: {exc}; shutting down", file=sys.stderr, flush=True)
            threading.Thread(target=self.server.shutdown, daemon=True).start()
            return
        except (KeyError, TypeError, ValueError) as exc:
            self._reply(400, {"error": f"bad request: {exc!r}; expected JSON with query, prompts, labels lists"})
            return
        self._reply(200, answer)

    def _reply(self, status: int, payload: dict[str, Any]) -> None:
        # A failed reward's own key is NaN, written as the NaN literal: OpenRLHF parses with Python's json, which
        # reads it, while a null would crash its tensor conversion (torch.tensor([None])).
        encoded = json.dumps(payload, default=str).encode()
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(encoded)))
        self.end_headers()
        self.wfile.write(encoded)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
        pass  # one line per sample would drown the run's log


def serve(host: str, port: int) -> ThreadingHTTPServer:
    """A started server (in a daemon thread); ``server.server_address`` has the bound port."""
    server = ThreadingHTTPServer((host, port), RewardHandler)
    threading.Thread(target=server.serve_forever, name="unirl-reward-server", daemon=True).start()
    return server


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m unirl.adapters.openrlhf_server",
                                     description=__doc__.split("\n")[0])
    parser.add_argument("--spec", required=True, help="the run's reward_spec.json")
    parser.add_argument("--host", default="127.0.0.1")
    parser.add_argument("--port", type=int, default=5000, help="0 picks a free port")
    ns = parser.parse_args(argv)
    os.environ[SPEC_ENV] = ns.spec
    server = ThreadingHTTPServer((ns.host, ns.port), RewardHandler)
    host, port = server.server_address[:2]
    print(f"unirl reward server on http://{host}:{port}/get_reward", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.server_close()
    return 0


if __name__ == "__main__":
    sys.exit(main())
