"""The HTTP form of the OpenRLHF reward contract, for ``--reward.remote_url http://host:port/get_reward``.

    python -m unirl.adapters.openrlhf_server --spec reward_spec.json [--host 127.0.0.1] [--port 5000]
        [--max-connections 256] [--max-waiting 4096] [--max-body-bytes 8388608] [--max-batch 1024]
        [--idle-timeout 15] [--header-timeout 10] [--request-timeout 30] [--backlog 1024] [--secret-file PATH]

OpenRLHF POSTs ``{"query": [...], "prompts": [...], "labels": [...]}`` and reads ``rewards``, ``scores`` and
``extra_logs`` from the JSON answer (the shape of its own ``cli/serve_rm.py``). The server scores with the
same executor as the in-process adapter, so both forms give identical numbers. Standard library only: it runs
in the backend's interpreter, where only unirl's light core is guaranteed.

What OpenRLHF 0.11.2's client does (``openrlhf/utils/agent.py``, ``_fetch_rewards_via_http``), and why the
server is shaped the way it is:

- a new aiohttp session, so a new connection, for every request, ``json=`` body (Content-Length, no chunking),
  ``ClientTimeout(total=180)``, no way to add a header: the optional shared secret is accepted as a path
  segment (``http://host:port/<secret>/get_reward``, posted verbatim) or as ``Authorization: Bearer <secret>``
  for other clients. It is read from ``$UNIRL_REWARD_SECRET`` or ``--secret-file`` (never the command line,
  which ``ps`` shows), and compared with :func:`hmac.compare_digest`.
- any non-2xx answer or connection error is retried 5 times, 1 s apart, then swallowed into ``reward=None``
  (the run crashes later with an unrelated error). So a client over the connection cap is not refused: the
  server takes it and lets it wait (:class:`RewardServer`'s reception stage) until a worker is free; per-connection
  deadlines (idle keep-alive, headers, whole request) end what slow or idle peers hold, and with ``--max-waiting``
  connections waiting, the one that waited longest is shed for a new one.
- every malformed request gets a 4xx with a JSON ``{"error", "field"}`` and never reaches scoring
  (:mod:`unirl.adapters.openrlhf_requests`), so it is never counted by the reward error policy; nor is a
  well-formed request whose labels are not the run's own rows (a 422, :class:`RunRows`).

When the recipe's policy aborts (``RewardAbort``: the reward code failed on the run's own rows) or the reward
runtime fails for good, the server answers 500 with the reason and shuts down: OpenRLHF's requests then fail and
the run stops, instead of training on made-up rewards. Nothing any other client sends can shut it down.
"""

from __future__ import annotations

import _thread
import argparse
import collections
import contextlib
import hmac
import io
import ipaddress
import json
import logging
import os
import queue
import re
import resource
import selectors
import socket
import sys
import threading
import time
import traceback
from dataclasses import dataclass
from http import HTTPStatus
from http.server import BaseHTTPRequestHandler
from pathlib import Path
from typing import Any

from unirl.adapters.common import SPEC_ENV
from unirl.adapters.openrlhf import ABORT_EXIT_CODE, score_queries
from unirl.adapters.openrlhf_requests import RUN_DATA_FILES, RequestError, RunRows, parse_batch
from unirl.rewards.executor import RewardAbort, RewardRuntimeError

# On stderr as "unirl reward server: ..." (see unirl.logs); the address announced on stdout stays a print.
# By name: under `python -m unirl.adapters.openrlhf_server`, __name__ is "__main__".
log = logging.LoggerAdapter(logging.getLogger("unirl.adapters.openrlhf_server"), {"prefix": "unirl reward server"})

SECRET_ENV = "UNIRL_REWARD_SECRET"
SECRET_FILE_ENV = "UNIRL_REWARD_SECRET_FILE"
ENDPOINT = "/get_reward"
# URL-safe, so the path-segment form needs no escaping; long enough not to be guessed over loopback.
SECRET_RE = re.compile(r"[A-Za-z0-9._~-]{16,256}")
CONTENT_LENGTH_RE = re.compile(r"[0-9]{1,15}")  # str.isdigit would take "٣"; int() would take "+5", " 5", "1_0"
LINGER_S = 1.0  # after an error reply, how long the client may go on sending what we did not read
POLL_S = 0.25  # the accept loop looks at shutdown() this often
KEEPALIVE_WAIT_S = 0.05  # how long a worker waits for a kept-alive client's next request before handing it back
STOP_GRACE_S = 5.0  # after a stop, how long the requests being scored have to be answered
SHED_AFTER_S = 1.0  # a waiting connection this old may be closed for a new one (see RewardServer._can_accept)
EXPIRY_S = 0.1  # how often the reception stage looks at the waiting connections' deadlines
MAX_HEAD_BYTES = 65536 + 100 * 8192  # a request line and headers as http.server takes them (its 100 x 64 kB)
THREAD_IDLE_S = 30.0  # a connection thread with no connection for this long ends


@dataclass(frozen=True)
class Limits:
    """What one client may hold or send; every wait has a deadline."""

    max_connections: int = 256
    """Requests answered at once (worker threads); whole requests beyond it wait in the reception stage."""
    max_waiting: int = 4096
    """Connections waiting for (the rest of) their request; with this many, the one that waited longest is closed
    for a new one (capped at half the process's file limit, less ``max_connections``)."""
    backlog: int = 1024
    """The listen queue (the kernel caps it at net.core.somaxconn)."""
    max_body_bytes: int = 8 << 20
    """A larger Content-Length is answered 413 before the body is read. One 32k-token rollout is ~130 kB."""
    max_batch: int = 1024
    """Samples in one request (OpenRLHF sends one per rollout, or a shard of a batch); more is a 413."""
    idle_timeout_s: float = 15.0
    """How long a connection may wait, new or kept alive, before the first byte of its next request."""
    request_timeout_s: float = 30.0
    """From a request's first byte to its whole body, and for writing the answer: a trickled request is a 408."""
    header_timeout_s: float = 10.0
    """From a request's first byte to the end of its headers (a client sends them in one go): else a 408."""

    def problems(self) -> list[str]:
        found = [f"{name} must be positive, not {getattr(self, name)!r}" for name in
                 ("max_connections", "max_waiting", "backlog", "max_body_bytes", "max_batch", "idle_timeout_s",
                  "request_timeout_s", "header_timeout_s")
                 if not getattr(self, name) > 0]
        return found


def load_secret(env: dict[str, str] | None = None, secret_file: str | None = None) -> str | None:
    """The shared secret from ``$UNIRL_REWARD_SECRET``, or the file ``secret_file`` / ``$UNIRL_REWARD_SECRET_FILE``
    names (first line); None when none is configured. Raises ValueError for an unusable secret."""
    env = dict(os.environ) if env is None else env
    path = secret_file or env.get(SECRET_FILE_ENV)
    if path:
        lines = Path(path).read_text(encoding="utf-8").splitlines()
        secret = lines[0].strip() if lines else ""
        where = f"the secret file {path}"
    elif env.get(SECRET_ENV) is not None:
        secret, where = env[SECRET_ENV].strip(), f"${SECRET_ENV}"
    else:
        return None
    if not SECRET_RE.fullmatch(secret):
        raise ValueError(f"{where}: a secret must be 16-256 characters of A-Z a-z 0-9 . _ ~ - (it goes in a URL "
                         "path); make one with: python -c 'import secrets; print(secrets.token_urlsafe(32))'")
    return secret


class _RequestReader:
    """A request's bytes for the handler: first what the reception stage already read (``prefix``), then the
    socket, every recv bounded by the request's deadline (a client trickling a byte a second cannot hold a worker).
    It consumes exactly what the handler asks for, so what is left after a request (a pipelined next one) goes back
    to the reception stage with the connection."""

    def __init__(self, sock: socket.socket, prefix: bytes, deadline: float) -> None:
        self.sock = sock
        self.buffer = bytearray(prefix)
        self.deadline = deadline

    def _fill(self) -> bool:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request deadline passed")
        self.sock.settimeout(remaining)
        chunk = self.sock.recv(65536)
        self.buffer += chunk
        return bool(chunk)

    def _take(self, n: int) -> bytes:
        out = bytes(self.buffer[:n])
        del self.buffer[:n]
        return out

    def readline(self, limit: int = -1) -> bytes:
        while True:
            end = self.buffer.find(b"\n")
            if end >= 0 and (limit < 0 or end < limit):
                return self._take(end + 1)
            if 0 <= limit <= len(self.buffer):
                return self._take(limit)
            if not self._fill():
                return self._take(len(self.buffer))  # the peer closed: what it sent

    def read(self, n: int = -1) -> bytes:
        while len(self.buffer) < n and self._fill():
            pass
        return self._take(n if n >= 0 else len(self.buffer))

    def leftover(self) -> bytes:
        return bytes(self.buffer)


class _SocketWriter(io.RawIOBase):
    """Unbuffered writes with their own timeout (a peer that never reads cannot hold the thread)."""

    def __init__(self, sock: socket.socket, timeout_s: float) -> None:
        super().__init__()
        self.sock = sock
        self.timeout_s = timeout_s

    def writable(self) -> bool:
        return True

    def write(self, b: Any) -> int:
        self.sock.settimeout(self.timeout_s)
        self.sock.sendall(b)
        return len(b)


class RewardHandler(BaseHTTPRequestHandler):
    """One connection: HTTP/1.1 keep-alive, every request answered (JSON), or the connection closed when idle."""

    server_version = "unirl-reward/2"
    sys_version = ""  # the Server header need not tell clients the Python version
    protocol_version = "HTTP/1.1"  # keep-alive for clients that reuse connections (OpenRLHF does not)
    default_request_version = "HTTP/1.0"  # so an error before the version is known still has a status line
    server: RewardServer  # type: ignore[assignment]  # ours, not a socketserver.BaseServer
    rfile: _RequestReader  # type: ignore[assignment]  # readline and read, as http.server uses them
    wfile: Any

    def __init__(self, conn: socket.socket, address: Any, server: RewardServer, prefix: bytes,
                 first_byte: float) -> None:
        self.prefix, self.first_byte = prefix, first_byte
        super().__init__(conn, address, server)  # type: ignore[arg-type]  # runs setup, handle, finish

    def setup(self) -> None:
        self.connection = self.request
        limits = self.server.limits
        with contextlib.suppress(OSError):  # small answers: do not wait for Nagle
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = _RequestReader(self.connection, self.prefix, self.first_byte + limits.request_timeout_s)
        self.rfile = self.reader
        self.wfile = _SocketWriter(self.connection, limits.request_timeout_s)
        self.linger = False  # set when we answer before reading everything the client sent
        self._head_error: RequestError | None = None
        self._head_checked = False
        self._replying = False

    def handle(self) -> None:
        """One request: the connection then goes back to the reception stage (keep-alive) or is closed."""
        self.handle_one_request()

    def finish(self) -> None:
        pass  # the server closes the socket (with a linger after errors), or takes it back: RewardServer._connection

    def handle_one_request(self) -> None:
        # http.server's version, reworked so that every request gets an answer: a timeout mid-request is a 408
        # (its version drops the connection), an unknown method a 405 (not 501), every error a JSON body.
        self.close_connection = True
        self.raw_requestline = b""
        self.command, self.request_version, self.requestline = "", self.default_request_version, ""
        try:
            line = self.rfile.readline(65537)
            for _ in range(4):  # RFC 9112 2.2: ignore empty lines before a request line
                if line not in (b"\r\n", b"\n"):
                    break
                line = self.rfile.readline(65537)
            if not line:
                return  # the peer closed its side
            self.raw_requestline = line
            if not line.strip():
                self.send_error(HTTPStatus.BAD_REQUEST, "no request line, only empty lines")
                return
            if len(line) > 65536:
                self.linger = True
                self.send_error(HTTPStatus.REQUEST_URI_TOO_LONG, "the request line is over 65,536 bytes")
                return
            if not line.endswith(b"\n") or not self.parse_request():
                if not line.endswith(b"\n"):  # the peer closed mid-line
                    self.send_error(HTTPStatus.BAD_REQUEST, "the request line ended without a line break")
                return  # parse_request answered (400, 431, 505) or the Expect check refused
            self._serve()
        except TimeoutError:
            # The request started (the reception stage saw its first byte) and was not answered in time (else: the
            # answer's own write timed out; nothing to add).
            if not self._replying:
                self.linger = True
                self.server.count(408)
                with contextlib.suppress(OSError):
                    self._reply(HTTPStatus.REQUEST_TIMEOUT, timeout_payload(self.server.limits), close=True)
            self.close_connection = True
        except OSError:  # the peer reset or went away; nobody is left to answer
            self.close_connection = True

    # -- one request ----------------------------------------------------------------------------------------------
    def _serve(self) -> None:
        server = self.server
        if server.stopped_because is not None:
            server.count(503)
            self.linger = True
            self._reply(HTTPStatus.SERVICE_UNAVAILABLE, {
                "error": f"the reward server stopped the run: {server.stopped_because}", "field": None}, close=True)
            return
        error = self._check_head()
        if error is not None:
            self._refuse(error)
            return
        length = int(self.headers["Content-Length"])
        body = self.rfile.read(length)
        if len(body) < length:
            self._refuse(RequestError(400, f"the body ended after {len(body)} of its {length} bytes (Content-Length)"))
            return
        try:
            batch = parse_batch(body, server.limits.max_batch)
        except RequestError as exc:
            server.count(exc.status)
            self._reply(exc.status, exc.payload())
            return
        foreign = server.run_rows.problem(batch.labels) if server.run_rows is not None else None
        if foreign is not None:  # not the run's rows: answered, never scored, never counted by the run's policy
            server.count(foreign.status)
            self._reply(foreign.status, foreign.payload())
            return
        self._score(batch.queries, batch.prompts, batch.labels)

    def _score(self, queries: list[str], prompts: list[str], labels: list[str | None]) -> None:
        server = self.server
        try:
            answer = score_queries(queries, prompts, labels)
        except (RewardAbort, RewardRuntimeError) as exc:
            # The only way to stop the server: the policy aborted on well-formed calls, or the reward runtime takes
            # no more work. OpenRLHF must stop rather than train on made-up rewards.
            # Stopped before the answer goes out, so that whoever reads the 500 finds the server already stopping.
            server.stop(str(exc) or type(exc).__name__)
            server.count(500)
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": str(exc), "field": None, "stopping": True},
                        close=True)
            return
        except Exception as exc:  # a defect in scoring: answer it, log it, keep serving
            server.count(500)
            log.error("scoring failed:\n%s", traceback.format_exc())
            self._reply(HTTPStatus.INTERNAL_SERVER_ERROR, {"error": f"scoring failed: {exc!r}", "field": None},
                        close=True)
            return
        server.count(200)
        self._reply(HTTPStatus.OK, answer)

    def _check_head(self) -> RequestError | None:
        """Everything decided by the request line and headers: path, secret, method, body framing and size."""
        if self._head_checked:
            return self._head_error
        self._head_checked = True
        self._head_error = error = self._head_problem()
        return error

    def _head_problem(self) -> RequestError | None:
        if self.headers.defects:
            # A line that is not "Name: value" (no colon, a space before the colon): RFC 9112 says refuse; the
            # parser would otherwise stop reading headers there and the rest would be taken for the body.
            return RequestError(400, f"malformed header line ({type(self.headers.defects[0]).__name__})")
        path = self.path.split("?", 1)[0]
        secret = self.server.secret
        if path == ENDPOINT:
            if secret is not None and not _bearer_matches(self.headers.get("Authorization"), secret):
                return RequestError(401, "this server needs its secret: POST to /<secret>/get_reward or send "
                                         "Authorization: Bearer <secret>")
        elif path.endswith(ENDPOINT) and path.count("/") == 2:
            if secret is None:
                return RequestError(404, f"no such endpoint: POST to {ENDPOINT} (this server has no secret)")
            if not hmac.compare_digest(path[1:-len(ENDPOINT)].encode("latin-1"), secret.encode()):
                return RequestError(401, "wrong secret in the path")
        else:
            shown = path if len(path) <= 80 else path[:80] + "..."
            return RequestError(404, f"no such endpoint {shown!r}: POST to {ENDPOINT}")
        if self.command != "POST":
            return RequestError(405, f"{self.command} is not allowed: POST a JSON body to {ENDPOINT}")
        content_type = (self.headers.get("Content-Type") or "").split(";", 1)[0].strip().lower()
        if content_type != "application/json":
            # Also what stops a web page from posting here: a browser sends a cross-site form or text/plain POST
            # without asking, but application/json only after a preflight (OPTIONS), which gets a 405.
            return RequestError(415, f"Content-Type must be application/json, not {content_type or 'absent'!r}",
                                "Content-Type")
        if self.headers.get("Transfer-Encoding") is not None:
            if self.headers.get("Content-Length") is not None:  # both: the classic request-smuggling ambiguity
                return RequestError(400, "both Transfer-Encoding and Content-Length", "Transfer-Encoding")
            return RequestError(411, "a chunked (Transfer-Encoding) body is not accepted: send Content-Length",
                                "Transfer-Encoding")
        lengths = self.headers.get_all("Content-Length") or []
        if not lengths:
            return RequestError(411, "Content-Length is required", "Content-Length")
        if len(lengths) > 1:
            return RequestError(400, f"{len(lengths)} Content-Length headers", "Content-Length")
        if not CONTENT_LENGTH_RE.fullmatch(lengths[0].strip()):
            return RequestError(400, f"Content-Length {lengths[0][:40]!r} is not a byte count", "Content-Length")
        if int(lengths[0]) > self.server.limits.max_body_bytes:
            return RequestError(413, f"the body ({int(lengths[0]):,} bytes) is over this server's --max-body-bytes "
                                     f"{self.server.limits.max_body_bytes:,}", "Content-Length")
        return None

    def handle_expect_100(self) -> bool:
        # Refuse before the client sends the body (a 413 for a 1 GB upload costs nothing); else continue.
        error = self._check_head()
        if error is not None:
            self._refuse(error)
            return False
        return super().handle_expect_100()

    # -- answers --------------------------------------------------------------------------------------------------
    def _refuse(self, error: RequestError) -> None:
        """An answer sent before (or instead of) reading the whole body: the connection closes after it."""
        self.server.count(error.status)
        self.linger = True
        headers = {"WWW-Authenticate": "Bearer"} if error.status == 401 else {}
        if error.status == 405:
            headers["Allow"] = "POST"
        self._reply(error.status, error.payload(), close=True, headers=headers)

    def send_error(self, code: int, message: str | None = None, explain: str | None = None) -> None:
        # http.server's own refusals (bad request line, header too long, too many headers, HTTP/2), as JSON.
        self.server.count(int(code))
        self.linger = True
        text = message or HTTPStatus(code).phrase
        self._reply(code, {"error": f"{text}: {explain}" if explain else text, "field": None}, close=True)

    def _reply(self, status: int, payload: dict[str, Any], *, close: bool = False,
               headers: dict[str, str] | None = None) -> None:
        # A failed reward's own key is NaN, written as the NaN literal: OpenRLHF parses with Python's json, which
        # reads it, while a null would crash its tensor conversion (torch.tensor([None])).
        encoded = json.dumps(payload, default=str).encode()
        self._replying = True
        if close:
            self.close_connection = True
        self.send_response(status)
        self.send_header("Content-Type", "application/json")
        self.send_header("Content-Length", str(len(encoded)))
        for key, value in (headers or {}).items():
            self.send_header(key, value)
        if self.close_connection:
            self.send_header("Connection", "close")
        self.end_headers()
        self.wfile.write(encoded)

    def log_message(self, format: str, *args: Any) -> None:  # http.server's signature
        pass  # one line per sample would drown the run's log; counts are in RewardServer.counts


def _bearer_matches(header: str | None, secret: str) -> bool:
    scheme, _, token = (header or "").strip().partition(" ")
    # compare_digest on bytes: on str it raises for non-ASCII, and header values arrive as latin-1 text.
    return scheme.lower() == "bearer" and hmac.compare_digest(token.strip().encode("latin-1"), secret.encode())


@dataclass
class _Waiting:
    """A connection in the reception stage: what it has sent of its next request, and since when."""

    conn: socket.socket
    address: Any
    since: float
    """When it was accepted, or came back from a worker (its idle deadline counts from here)."""
    buffer: bytearray
    first_byte: float | None = None
    draining_until: float | None = None
    """Set once it is being closed after an early answer: read and dropped until then (see :func:`_close`)."""
    head_end: int | None = None
    """Where its head ends in ``buffer`` (None: not yet)."""
    scanned: int = 0
    """How much of ``buffer`` has been searched for the head's end: each byte is looked at once."""
    needed: int | None = None
    """The whole request's length once its head says so (None: hand it over when its head is in)."""

    def complete(self, limits: Limits) -> bool:
        """Whether a worker can take it: its whole request (the head, and the body its Content-Length announces when
        the handler will read it), or a head whose answer the head alone decides (no or several Content-Length,
        chunked, Expect, too large a body), or more bytes than any head may have. Incremental: a client trickling
        its head a byte at a time costs linear time, not quadratic."""
        if self.head_end is None:
            start = len(self.buffer) - len(self.buffer.lstrip(b"\r\n"))
            if start > 8:  # more empty lines than a request may start with: the handler answers 400
                return True
            found = HEAD_END.search(self.buffer, max(start, self.scanned - 3))
            self.scanned = len(self.buffer)
            if found is None:
                return len(self.buffer) - start > MAX_HEAD_BYTES  # the handler answers 414/431
            self.head_end = found.end()
            self.needed = body_end(bytes(self.buffer[start:found.start()]), found.end(), limits)
        return self.needed is None or len(self.buffer) >= self.needed


HEAD_END = re.compile(rb"\r?\n\r?\n")


def body_end(head: bytes, head_end: int, limits: Limits) -> int | None:
    """Where a request whose head is ``head`` ends, when its body is one the handler will read (one Content-Length
    of at most ``max_body_bytes``, no Transfer-Encoding, no Expect); else None."""
    lower = head.lower()
    if b"\ntransfer-encoding:" in lower or b"\nexpect:" in lower:
        return None
    lengths = [line.split(b":", 1)[1].strip() for line in lower.split(b"\n") if line.startswith(b"content-length:")]
    if len(lengths) != 1 or not CONTENT_LENGTH_RE.fullmatch(lengths[0].decode("latin-1")):
        return None
    length = int(lengths[0])
    return None if length > limits.max_body_bytes else head_end + length


def timeout_payload(limits: Limits) -> dict[str, Any]:
    return {"error": f"the request did not arrive in time: its headers within {limits.header_timeout_s:g} s, the "
                     f"whole request within {limits.request_timeout_s:g} s of its first byte", "field": None}


def _raw_reply(status: HTTPStatus, payload: dict[str, Any], extra: str = "") -> bytes:
    body = json.dumps(payload).encode()
    return (f"HTTP/1.1 {status.value} {status.phrase}\r\nServer: {RewardHandler.server_version}\r\n"
            f"Content-Type: application/json\r\nContent-Length: {len(body)}\r\n{extra}Connection: close\r\n\r\n"
            ).encode("latin-1") + body


class RewardServer:
    """A reception stage in one thread, and worker threads that answer whole requests, at most ``max_connections``
    at once.

    The reception stage accepts every connection (up to ``max_waiting``, far below the process's file limit), reads
    what each sends without blocking, and hands a connection to a worker only once its whole request has arrived
    (or its head alone decides the answer). So clients that are slow or idle hold a few bytes of buffer, never a
    worker: a slowloris crowd cannot keep a real request out. Each waiting connection has deadlines (the first byte
    of its request within ``idle_timeout_s``, its headers within ``header_timeout_s`` of that, the whole request
    within ``request_timeout_s``: else a 408, or closed silently when it sent nothing), and when ``max_waiting`` are
    waiting, the one that has waited longest is closed for a new one (fair shedding: a 503 when it had started a
    request). After an answer a keep-alive connection comes back to the reception stage.

    Not ``socketserver.ThreadingTCPServer``: that starts a thread per connection at once, with no cap, and listens
    with a backlog of 5."""

    def __init__(self, host: str, port: int, limits: Limits | None = None, secret: str | None = None,
                 run_rows: RunRows | None = None) -> None:
        self.limits = limits or Limits()
        self.run_rows = run_rows
        """The run's own rows: other labels are refused (422) before scoring (None: every label is scored)."""
        problems = self.limits.problems()
        if problems:
            raise ValueError("; ".join(problems))
        if secret is not None and not SECRET_RE.fullmatch(secret):
            raise ValueError("a secret must be 16-256 characters of A-Z a-z 0-9 . _ ~ -")
        self.secret = secret
        # Every connection is a file descriptor: stay well under the process's limit so that the rewards' workers,
        # the trajectory log and the backend keep theirs (1,021 idle connections used to exhaust a 1,024 limit).
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        room = max(2, soft // 2) if soft != resource.RLIM_INFINITY else 1 << 16
        self.max_connections = min(self.limits.max_connections, room)
        """Requests answered at once (worker threads)."""
        self.max_waiting = max(1, min(self.limits.max_waiting, room - self.max_connections))
        """Connections waiting for (the rest of) their request in the reception stage."""
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=self.limits.backlog)
        self.socket.setblocking(False)
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._lock = threading.Lock()
        self._waiting: dict[socket.socket, _Waiting] = {}  # the reception thread's own
        self._ready: collections.deque[_Waiting] = collections.deque()  # whole requests waiting for a worker
        self._busy: set[socket.socket] = set()  # connections a worker holds
        self._returned: queue.SimpleQueue[tuple[socket.socket, Any, bytes]] = queue.SimpleQueue()
        self._wake_r, self._wake_w = socket.socketpair()
        self._wake_r.setblocking(False)
        self._wake_w.setblocking(False)
        self.shed = 0
        """Waiting connections closed to make room for a new one."""
        self._next_expiry = 0.0
        self._listener_closed = False
        self._handoff: queue.SimpleQueue[tuple[socket.socket, Any, bytes, float] | None] = queue.SimpleQueue()
        self._idle_threads = 0
        self._threads = 0
        self._closed = False
        self.peak_connections = 0
        """The most connections open at once: waiting in the reception stage or held by a worker."""
        self.peak_busy = 0
        """The most requests answered at once (at most ``max_connections``)."""
        self.counts: dict[int, int] = {}
        """Answers by HTTP status since start (200 = scored)."""
        self.stopped_because: str | None = None
        self._stop = threading.Event()
        self._serving = threading.Event()
        self._done = threading.Event()
        self._done.set()

    # -- the reception stage --------------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._done.clear()
        self._serving.set()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self._wake_r, selectors.EVENT_READ, "wake")
                listening = False
                while not self._stop.is_set():
                    if self.stopped_because is not None and not self._listener_closed:
                        if listening:
                            selector.unregister(self.socket)
                            listening = False
                        with contextlib.suppress(OSError):
                            self.socket.close()  # queued connections are refused now, not left waiting
                        self._listener_closed = True
                    elif not self._listener_closed and listening != self._can_accept():
                        # at the waiting cap with nobody to shed: new connections wait in the kernel's backlog
                        if listening:
                            selector.unregister(self.socket)
                        else:
                            selector.register(self.socket, selectors.EVENT_READ, "listen")
                        listening = not listening
                    for key, _ in selector.select(self._next_deadline()):
                        if key.data == "listen":
                            self._accept(selector)
                        elif key.data == "wake":
                            with contextlib.suppress(OSError):
                                while self._wake_r.recv(4096):
                                    pass
                        else:
                            self._receive(selector, key.data)
                    self._take_back(selector)
                    self._expire(selector)
                    self._dispatch()
                for waiting in list(self._waiting.values()):
                    self._forget(selector, waiting)
                    waiting.conn.close()
        finally:
            self._serving.clear()
            self._done.set()

    def _next_deadline(self) -> float:
        return POLL_S if self._waiting or self._ready else POLL_S * 4

    def _accept(self, selector: selectors.BaseSelector) -> None:
        for _ in range(256):  # a burst at a time, then the rest of the loop runs
            try:
                conn, address = self.socket.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                return
            except OSError as exc:  # EMFILE/ENFILE: the connection stays queued; do not spin on it
                log.warning("accept failed (%s); retrying", exc)
                time.sleep(POLL_S)
                return
            if self._held() >= self.max_waiting and not self._shed_oldest(selector):
                self.shed += 1  # every place holds a request parked for a worker: the newcomer goes instead
                conn.close()
                return
            self._watch(selector, conn, address, b"")
            if not self._can_accept():
                return

    def _can_accept(self) -> bool:
        """Room for one more waiting connection: under the cap, or one waiting long enough to be shed for it. A
        connection younger than SHED_AFTER_S is not shed (a burst of real clients sends its requests at once), so
        at the cap with none older, new connections wait in the backlog instead."""
        if self._held() < self.max_waiting:
            return True
        oldest = next((w for w in self._waiting.values() if w.draining_until is None), None)
        if oldest is None:  # every place is a request parked for a worker, or one being closed: none to shed
            return not self._ready and bool(self._waiting)
        return time.monotonic() - oldest.since >= SHED_AFTER_S

    def _held(self) -> int:
        """Connections the reception stage holds: waiting for their request, or holding one parked for a worker."""
        return len(self._waiting) + len(self._ready)

    def _watch(self, selector: selectors.BaseSelector, conn: socket.socket, address: Any, buffer: bytes) -> None:
        now = time.monotonic()
        conn.setblocking(False)
        waiting = _Waiting(conn, address, now, bytearray(buffer), now if buffer else None)
        self._waiting[conn] = waiting
        with self._lock:
            self.peak_connections = max(self.peak_connections, self._held() + len(self._busy))
        if buffer and waiting.complete(self.limits):
            self._ready.append(waiting)
            self._waiting.pop(conn)
            return
        selector.register(conn, selectors.EVENT_READ, waiting)

    def _forget(self, selector: selectors.BaseSelector, waiting: _Waiting) -> None:
        self._waiting.pop(waiting.conn, None)
        with contextlib.suppress(KeyError, ValueError, OSError):
            selector.unregister(waiting.conn)

    def _receive(self, selector: selectors.BaseSelector, waiting: _Waiting) -> None:
        try:
            chunk = waiting.conn.recv(65536)
        except (BlockingIOError, InterruptedError):
            return
        except OSError:
            chunk = b""
        if not chunk and waiting.buffer.strip() and waiting.draining_until is None:
            # the peer shut its side mid-request: a worker answers what arrived (a 400), which it can still read
            self._forget(selector, waiting)
            self._ready.append(waiting)
            return
        if not chunk or waiting.draining_until is not None:
            if not chunk:  # the peer closed (or, draining, finished sending): nothing to answer
                self._forget(selector, waiting)
                waiting.conn.close()
            return
        waiting.buffer += chunk
        if waiting.first_byte is None:
            waiting.first_byte = time.monotonic()
        if waiting.complete(self.limits):
            self._forget(selector, waiting)
            self._ready.append(waiting)

    def _expire(self, selector: selectors.BaseSelector) -> None:
        now, limits = time.monotonic(), self.limits
        if now < self._next_expiry:  # deadlines are coarse: a pass over every waiting connection ten times a second
            return
        self._next_expiry = now + EXPIRY_S
        for waiting in list(self._waiting.values()):
            if waiting.draining_until is not None:
                if now >= waiting.draining_until:
                    self._forget(selector, waiting)
                    waiting.conn.close()
            elif waiting.first_byte is None:
                if now - waiting.since >= limits.idle_timeout_s:  # nothing asked: closed without an answer, which
                    self._forget(selector, waiting)  # a client could misread as the answer to what it is sending
                    waiting.conn.close()
            elif now - waiting.first_byte >= (limits.request_timeout_s if waiting.head_end is not None
                                              else min(limits.header_timeout_s, limits.request_timeout_s)):
                self.count(408)
                self._answer_and_close(selector, waiting, HTTPStatus.REQUEST_TIMEOUT, timeout_payload(limits))

    def _shed_oldest(self, selector: selectors.BaseSelector) -> bool:
        """Make room for a new connection: close the one that has waited longest for its request (the first in
        ``_waiting``, which holds connections in the order they started waiting). False when none waits (every
        place holds a request parked for a worker)."""
        if not self._waiting:
            return False
        oldest = next((w for w in self._waiting.values() if w.draining_until is None), None)
        if oldest is None:  # every one is already being closed: the oldest goes now
            oldest = next(iter(self._waiting.values()))
            self._forget(selector, oldest)
            oldest.conn.close()
            return True
        self.shed += 1
        if oldest.first_byte is None:
            self._forget(selector, oldest)
            oldest.conn.close()
            return True
        self.count(503)
        self._answer_and_close(selector, oldest, HTTPStatus.SERVICE_UNAVAILABLE, {
            "error": f"{self.max_waiting} connections were waiting for their requests and this one had waited "
                     "longest: retry", "field": None}, "Retry-After: 1\r\n")
        self._forget(selector, oldest)  # a shed connection's drain does not hold a place either
        oldest.conn.close()
        return True

    def _answer_and_close(self, selector: selectors.BaseSelector, waiting: _Waiting, status: HTTPStatus,
                          payload: dict[str, Any], extra: str = "") -> None:
        """An answer decided in the reception stage (small: one send without blocking), then a short drain of what
        the client still sends, so that its close does not reset the connection before the answer is read."""
        with contextlib.suppress(OSError):
            waiting.conn.send(_raw_reply(status, payload, extra))
            waiting.conn.shutdown(socket.SHUT_WR)
        waiting.draining_until = time.monotonic() + LINGER_S

    def _take_back(self, selector: selectors.BaseSelector) -> None:
        """Keep-alive connections the workers are done with: they wait for their next request here."""
        while True:
            try:
                conn, address, leftover = self._returned.get_nowait()
            except queue.Empty:
                return
            if self._stop.is_set() or (self._held() >= self.max_waiting and not leftover):
                # at the cap an idle keep-alive connection is closed rather than a waiting client shed for it
                # (HTTP lets a server close an idle persistent connection; the client opens a new one)
                conn.close()
                continue
            if self._held() >= self.max_waiting and not self._shed_oldest(selector):
                conn.close()  # every place holds a parked request: this connection's partial request goes
                continue
            self._watch(selector, conn, address, leftover)

    def _dispatch(self) -> None:
        while self._ready and self._slots.acquire(blocking=False):
            waiting = self._ready.popleft()
            with self._lock:
                self._busy.add(waiting.conn)
                self.peak_busy = max(self.peak_busy, len(self._busy))
            self._hand_to_worker(waiting)

    def _hand_to_worker(self, waiting: _Waiting) -> None:
        waiting.conn.setblocking(True)
        self._handoff.put((waiting.conn, waiting.address, bytes(waiting.buffer),
                           waiting.first_byte or time.monotonic()))
        with self._lock:
            spawn = self._idle_threads == 0  # else an idle thread takes it (and is no longer idle)
            if spawn:
                self._threads += 1
            else:
                self._idle_threads -= 1
        if spawn:
            try:
                # _thread, not threading.Thread: Thread.start() waits until the new thread holds the GIL, which
                # under load stalled this loop for each new connection of a burst.
                _thread.start_new_thread(self._worker, ())
            except RuntimeError as exc:  # no thread left: it waits for a busy thread to come back for it
                with self._lock:
                    self._threads -= 1
                log.warning("cannot start a thread (%s)", exc)

    # -- the workers ----------------------------------------------------------------------------------------------
    def _worker(self) -> None:
        # Threads are kept for the next request (starting threads under load cost more than the requests); one
        # ends after THREAD_IDLE_S without work, or when the server is closed.
        try:
            while True:
                try:
                    item = self._handoff.get(timeout=THREAD_IDLE_S)
                except queue.Empty:
                    with self._lock:
                        leave = self._idle_threads > 0 or self._closed  # else a request is promised to us
                        if leave and not self._closed:
                            self._idle_threads -= 1
                    if leave:
                        return
                    continue
                if item is None:
                    return
                self._connection(*item)
                with self._lock:
                    self._idle_threads += 1
        finally:
            with self._lock:
                self._threads -= 1

    def _connection(self, conn: socket.socket, address: Any, prefix: bytes, first_byte: float) -> None:
        handler: RewardHandler | None = None
        keep = False
        leftover = b""
        try:
            while not self._closed:
                handler = RewardHandler(conn, address, self, prefix, first_byte)
                keep = not handler.close_connection and not self._stop.is_set()
                leftover = handler.reader.leftover()
                if not keep:
                    break
                # A keep-alive client usually sends its next request as soon as it has the answer: wait a moment
                # for it here, which spares two hand-overs; a client that does not goes back to the reception stage.
                state, received = self._next_request_soon(conn, leftover)
                if state != "request":
                    keep, leftover = state == "partial", received
                    break
                prefix, first_byte, leftover = received, time.monotonic(), b""
        except OSError:  # the peer went away while its next request was awaited
            keep = False
        except Exception:  # a defect; the connection is all it may cost
            log.error("connection failed:\n%s", traceback.format_exc())
            keep = False
        finally:
            with self._lock:
                self._busy.discard(conn)
            if keep and handler is not None:
                self._returned.put((conn, address, leftover))
                with contextlib.suppress(OSError):
                    self._wake_w.send(b"x")
            else:
                _close(conn, handler is None or handler.linger, self.limits.max_body_bytes + 65536)
            self._slots.release()
            with contextlib.suppress(OSError):
                self._wake_w.send(b"x")  # a slot is free: the reception stage may dispatch the next request

    def _next_request_soon(self, conn: socket.socket, leftover: bytes) -> tuple[str, bytes]:
        """A kept-alive connection's next request, waited for up to KEEPALIVE_WAIT_S (``leftover``: what the last
        request left unread): ``("request", bytes)`` when a whole one came (or the client shut its side after part
        of one: a worker answers it), ``("partial", bytes)`` when the wait ended first (the reception stage takes
        the connection with those bytes), ``("closed", b"")`` when the client closed it."""
        waiting = _Waiting(conn, None, 0.0, bytearray(leftover))
        deadline = time.monotonic() + KEEPALIVE_WAIT_S
        while not waiting.complete(self.limits):
            remaining = deadline - time.monotonic()
            if remaining <= 0 or self._ready:  # others wait for a worker: do not hold this one for a maybe
                return "partial", bytes(waiting.buffer)
            conn.settimeout(remaining)
            try:
                chunk = conn.recv(65536)
            except TimeoutError:
                return "partial", bytes(waiting.buffer)
            if not chunk:
                return ("request", bytes(waiting.buffer)) if waiting.buffer.strip() else ("closed", b"")
            waiting.buffer += chunk
        return "request", bytes(waiting.buffer)

    def count(self, status: int) -> None:
        with self._lock:
            self.counts[status] = self.counts.get(status, 0) + 1

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._busy) + len(self._waiting) + len(self._ready)

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def stop(self, reason: str) -> None:
        """The run is over (policy abort, failed runtime): stop listening, answer 503 on the connections still open,
        and end the reception stage once the requests being scored are answered (a grace of a few seconds)."""
        with self._lock:
            if self.stopped_because is None:
                self.stopped_because = reason
        log.warning("shutting down: %s", reason)
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        threading.Thread(target=self._wind_down, daemon=True).start()

    def _wind_down(self) -> None:
        self.wait_idle(STOP_GRACE_S)
        time.sleep(LINGER_S)  # what a kept-alive client sends right after the abort still gets its 503
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")

    def shutdown(self) -> None:
        """Stop the reception stage and wait for it (like socketserver's); requests being answered go on."""
        self._stop.set()
        with contextlib.suppress(OSError):
            self._wake_w.send(b"x")
        if self._serving.is_set():
            self._done.wait()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no request is being answered; False when some still were at the timeout."""
        deadline = time.monotonic() + timeout_s
        while self._busy and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self._busy

    def server_close(self) -> None:
        """Close the listening socket and every open connection (their threads end)."""
        self.shutdown()  # the reception stage first: it must not select on a closed socket
        with contextlib.suppress(OSError):
            self.socket.close()
        with self._lock:
            busy = list(self._busy)
            self._closed = True
            threads = self._threads
        for conn in busy:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        for waiting in self._ready:
            waiting.conn.close()
        self._ready.clear()
        for _ in range(threads):
            self._handoff.put(None)  # every worker thread ends when it next looks for work
        for end in (self._wake_r, self._wake_w):
            end.close()


def _close(conn: socket.socket, linger: bool, linger_bytes: int) -> None:
    """Close after the answer. After an error answered early, read (and drop) what the client is still sending
    for a moment: closing with unread data makes the kernel send a reset, and a client that is still writing
    its body would see that reset instead of our 413."""
    with contextlib.suppress(OSError):
        conn.shutdown(socket.SHUT_WR)
        if linger:
            deadline, drained = time.monotonic() + LINGER_S, 0
            buffer = bytearray(65536)
            while drained < linger_bytes:
                remaining = deadline - time.monotonic()
                if remaining <= 0:
                    break
                conn.settimeout(min(remaining, 0.25))  # a quiet client is done sending
                n = conn.recv_into(buffer)
                if not n:
                    break
                drained += n
    conn.close()


def serve(host: str = "127.0.0.1", port: int = 0, *, limits: Limits | None = None,
          secret: str | None = None, run_rows: RunRows | None = None) -> RewardServer:
    """A started server (in a daemon thread); ``server.server_address`` has the bound port."""
    server = RewardServer(host, port, limits, secret, run_rows)
    threading.Thread(target=server.serve_forever, name="unirl-reward-server", daemon=True).start()
    return server


def _is_loopback(host: str) -> bool:
    if host == "localhost":
        return True
    try:
        return ipaddress.ip_address(host).is_loopback
    except ValueError:
        return False


def main(argv: list[str] | None = None) -> int:
    # allow_abbrev=False: "--secret VALUE" would otherwise be taken for --secret-file, and its error message would
    # print the secret.
    parser = argparse.ArgumentParser(prog="python -m unirl.adapters.openrlhf_server", allow_abbrev=False,
                                     description=(__doc__ or "").split("\n")[0])
    default = Limits()
    parser.add_argument("--spec", required=True, help="the run's reward_spec.json")
    parser.add_argument("--host", default="127.0.0.1", help="default: loopback only")
    parser.add_argument("--port", type=int, default=5000, help="0 picks a free port")
    parser.add_argument("--max-connections", type=int, default=default.max_connections,
                        help="requests answered at once; more wait for a worker")
    parser.add_argument("--max-waiting", type=int, default=default.max_waiting,
                        help="connections waiting for their request; past it the longest waiting is closed")
    parser.add_argument("--backlog", type=int, default=default.backlog, help="listen queue length")
    parser.add_argument("--max-body-bytes", type=int, default=default.max_body_bytes, help="larger bodies get 413")
    parser.add_argument("--max-batch", type=int, default=default.max_batch, help="samples per request; more get 413")
    parser.add_argument("--idle-timeout", type=float, default=default.idle_timeout_s,
                        help="seconds a connection may wait for its next request")
    parser.add_argument("--header-timeout", type=float, default=default.header_timeout_s,
                        help="seconds from a request's first byte to its last header (else 408)")
    parser.add_argument("--request-timeout", type=float, default=default.request_timeout_s,
                        help="seconds from a request's first byte to its whole body (else 408)")
    parser.add_argument("--secret-file", help=f"a file whose first line is the shared secret (or set ${SECRET_ENV} "
                                              f"or ${SECRET_FILE_ENV}; never the secret itself on the command line)")
    ns = parser.parse_args(argv)
    limits = Limits(max_connections=ns.max_connections, max_waiting=ns.max_waiting, backlog=ns.backlog,
                    max_body_bytes=ns.max_body_bytes, max_batch=ns.max_batch, idle_timeout_s=ns.idle_timeout,
                    header_timeout_s=ns.header_timeout, request_timeout_s=ns.request_timeout)
    if limits.problems():
        parser.error("; ".join(limits.problems()))
    try:
        secret = load_secret(secret_file=ns.secret_file)
    except (OSError, ValueError) as exc:
        parser.error(str(exc))
    os.environ[SPEC_ENV] = ns.spec
    run_rows = RunRows(Path(ns.spec).resolve().parent)
    server = RewardServer(ns.host, ns.port, limits, secret, run_rows)
    if run_rows.digests is None:
        log.warning("no rows exported beside %s (%s): every well-formed request is scored and counts towards the "
                    "run's reward error policy, which may stop this server; set a secret", ns.spec,
                    ", ".join(RUN_DATA_FILES.values()))
    host, port = server.server_address[:2]
    where = f"http://{host}:{port}"
    if secret is None:
        print(f"unirl reward server on {where}{ENDPOINT}", flush=True)
        if not _is_loopback(ns.host):
            log.warning("listening on %s without a secret: anyone who can reach it can feed the run's reward policy; "
                        "set $%s or --secret-file", ns.host, SECRET_ENV)
    else:
        print(f"unirl reward server on {where}/<secret>{ENDPOINT} (or {where}{ENDPOINT} with Authorization: "
              "Bearer <secret>)", flush=True)
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.wait_idle(5.0)  # after a stop, the requests being scored still get their answers
        server.server_close()
    return ABORT_EXIT_CODE if server.stopped_because is not None else 0


if __name__ == "__main__":
    sys.exit(main())
