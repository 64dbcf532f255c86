"""The HTTP form of the OpenRLHF reward contract, for ``--reward.remote_url http://host:port/get_reward``.

    python -m unirl.adapters.openrlhf_server --spec reward_spec.json [--host 127.0.0.1] [--port 5000]
        [--max-connections 256] [--max-body-bytes 8388608] [--max-batch 1024] [--idle-timeout 15]
        [--request-timeout 30] [--backlog 1024] [--secret-file PATH]

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
  server stops accepting and the connection waits in a deep listen backlog (``--backlog``) within its 180 s,
  while per-connection deadlines (idle keep-alive, headers, whole request) free the slots that slow or idle peers
  hold, and with every slot taken the slowest of them is shed for a waiting connection (``Limits.shed_after_s``).
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
SHED_POLL_S = 0.01  # with every slot busy, how often the accept loop looks for a waiting connection
THREAD_IDLE_S = 30.0  # a connection thread with no connection for this long ends


@dataclass(frozen=True)
class Limits:
    """What one client may hold or send; every wait has a deadline."""

    max_connections: int = 256
    """Connections served at once; more wait in the listen backlog (not refused: see the module docstring)."""
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
    shed_after_s: float = 1.0
    """When every slot is taken and a new connection waits, the connection that has waited longest for a request
    head (idle, or still sending headers) is closed to make room, once it has held its slot this long: slow and idle
    clients cannot keep a real request out (fair shedding)."""

    def problems(self) -> list[str]:
        found = [f"{name} must be positive, not {getattr(self, name)!r}" for name in
                 ("max_connections", "backlog", "max_body_bytes", "max_batch", "idle_timeout_s", "request_timeout_s",
                  "header_timeout_s", "shed_after_s")
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


class ShedConnection(Exception):
    """The server closed this connection's reading side to make room for a waiting one (fair shedding)."""


class _DeadlineReader(io.RawIOBase):
    """The socket as a raw stream whose every recv is bounded by one deadline per request.

    A plain socket timeout bounds each recv, so a client trickling one byte a second would hold a connection
    forever (slowloris). Here a connection first gets ``idle_s`` for the first byte of its next request, and
    from that byte ``request_s`` for the whole request line, headers and body."""

    def __init__(self, sock: socket.socket, idle_s: float, request_s: float, head_s: float,
                 on_first_byte: Any = None, is_shed: Any = None) -> None:
        super().__init__()
        self.sock = sock
        self.is_shed = is_shed
        self.idle_s = idle_s
        self.request_s = request_s
        self.head_s = head_s
        self.on_first_byte = on_first_byte
        self.deadline = 0.0
        self.first_byte = 0.0
        self.received = False
        self.next_request()

    def next_request(self) -> None:
        self.deadline = time.monotonic() + self.idle_s
        self.received = False

    def head_read(self) -> None:
        """The headers are in: the body has what is left of the request's whole deadline."""
        self.deadline = self.first_byte + self.request_s

    def readable(self) -> bool:
        return True

    def readinto(self, buffer: Any) -> int:
        remaining = self.deadline - time.monotonic()
        if remaining <= 0:
            raise TimeoutError("the request deadline passed")
        self.sock.settimeout(remaining)
        n = self.sock.recv_into(buffer)
        if not n and self.is_shed is not None and self.is_shed():
            raise ShedConnection
        if n and not self.received:
            self.received = True
            self.first_byte = time.monotonic()
            self.deadline = self.first_byte + min(self.head_s, self.request_s)
            if self.on_first_byte is not None:
                self.on_first_byte()
        return n


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
    rfile: io.BufferedReader
    wfile: Any

    def setup(self) -> None:
        self.connection = self.request
        limits = self.server.limits
        with contextlib.suppress(OSError):  # small answers: do not wait for Nagle
            self.connection.setsockopt(socket.IPPROTO_TCP, socket.TCP_NODELAY, 1)
        self.reader = _DeadlineReader(self.connection, limits.idle_timeout_s, limits.request_timeout_s,
                                      limits.header_timeout_s,
                                      lambda: self.server.phase(self.connection, "head"),
                                      lambda: self.server.is_shed(self.connection))
        self.rfile = io.BufferedReader(self.reader, 65536)
        self.wfile = _SocketWriter(self.connection, limits.request_timeout_s)
        self.linger = False  # set when we answer before reading everything the client sent
        self._head_error: RequestError | None = None
        self._head_checked = False
        self._replying = False

    def finish(self) -> None:
        pass  # the server closes the socket (with a linger after errors): see RewardServer._connection

    def handle_one_request(self) -> None:
        # http.server's version, reworked so that every request gets an answer: a timeout mid-request is a 408
        # (its version drops the connection), an unknown method a 405 (not 501), every error a JSON body.
        self.close_connection = True
        self.raw_requestline = b""
        self.command, self.request_version, self.requestline = "", self.default_request_version, ""
        self._head_error, self._head_checked, self._replying = None, False, False  # per request, not per connection
        self.reader.next_request()
        self.server.phase(self.connection, "idle")
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
            self.reader.head_read()
            self.server.phase(self.connection, "body")  # a whole head arrived: no longer shed for being slow
            self._serve()
        except TimeoutError:
            # A request started and not yet answered (else: the answer's own write timed out; nothing to add).
            if (self.reader.received or self.raw_requestline) and not self._replying:
                self.linger = True
                self.server.count(408)
                with contextlib.suppress(OSError):
                    limits = self.server.limits
                    self._reply(HTTPStatus.REQUEST_TIMEOUT, {
                        "error": f"the request did not arrive in time: its headers within "
                                 f"{limits.header_timeout_s:g} s, the whole request within "
                                 f"{limits.request_timeout_s:g} s of its first byte", "field": None}, close=True)
            # else: an idle connection, closed silently. An unasked-for 408 on it could be read by a client as the
            # answer to the request it is just sending.
            self.close_connection = True
        except ShedConnection:
            # Closed to make room while this client was idle or still sending its head (slow). A request that had
            # started is told so; an idle connection is closed silently, as above.
            self.close_connection = True
            if self.reader.received and not self._replying:
                self.linger = True
                self.server.count(503)
                with contextlib.suppress(OSError):
                    self._reply(HTTPStatus.SERVICE_UNAVAILABLE, {
                        "error": "every connection slot was taken and this request's headers were still arriving "
                                 f"after {self.server.limits.shed_after_s:g} s: retry", "field": None},
                                close=True, headers={"Retry-After": "1"})
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


class RewardServer:
    """The listening socket, its accept loop and a thread per open connection, at most ``max_connections``.

    Not ``socketserver.ThreadingTCPServer``: that accepts every connection at once (a new thread each, no cap) and
    uses a listen backlog of 5, so bursts of new connections were dropped by the kernel and retried a second
    later. Here the loop takes a connection only when a slot is free (the rest wait in the backlog), and a thread
    whose connection closed waits for the next one instead of ending."""

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
        # A slot is a file descriptor: stay well under the process's limit so that the rewards' workers, the
        # trajectory log and the backend keep theirs (1,021 idle connections used to exhaust a 1,024 limit).
        soft, _ = resource.getrlimit(resource.RLIMIT_NOFILE)
        cap = self.limits.max_connections
        self.max_connections = min(cap, max(1, soft // 2)) if soft != resource.RLIM_INFINITY else cap
        family = socket.AF_INET6 if ":" in host else socket.AF_INET
        self.socket = socket.create_server((host, port), family=family, backlog=self.limits.backlog)
        self.socket.setblocking(False)
        self.server_address: tuple[Any, ...] = self.socket.getsockname()
        self._slots = threading.BoundedSemaphore(self.max_connections)
        self._lock = threading.Lock()
        self._live: dict[socket.socket, tuple[str, float]] = {}
        """Open connections: what each is doing (idle, head, body) and since when."""
        self.shed = 0
        """Connections closed to make room for a waiting one (see ``Limits.shed_after_s``)."""
        self._handoff: queue.SimpleQueue[tuple[socket.socket, Any] | None] = queue.SimpleQueue()
        self._idle_threads = 0
        self._threads = 0
        self._closed = False
        self.peak_connections = 0
        self.counts: dict[int, int] = {}
        """Answers by HTTP status since start (200 = scored)."""
        self.stopped_because: str | None = None
        self._stop = threading.Event()
        self._serving = threading.Event()
        self._done = threading.Event()
        self._done.set()

    # -- lifecycle ------------------------------------------------------------------------------------------------
    def serve_forever(self) -> None:
        self._done.clear()
        self._serving.set()
        try:
            with selectors.DefaultSelector() as selector:
                selector.register(self.socket, selectors.EVENT_READ)
                while not self._stop.is_set():
                    if not self._slots.acquire(timeout=SHED_POLL_S):
                        # every slot busy: new connections wait in the backlog, unless a slow one makes room
                        if selector.select(0):
                            self._shed_one()
                        continue
                    if not self._accept_one(selector):
                        self._slots.release()
        finally:
            self._serving.clear()
            self._done.set()

    def _accept_one(self, selector: selectors.BaseSelector) -> bool:
        """Wait for one connection and hand it (and the held slot) to a thread; False: the slot is still ours."""
        while not self._stop.is_set():
            if not selector.select(POLL_S):
                continue
            try:
                conn, address = self.socket.accept()
            except (BlockingIOError, InterruptedError, ConnectionAbortedError):
                continue  # another wake-up took it, or the peer gave up before we accepted
            except OSError as exc:  # EMFILE/ENFILE: the connection stays queued; do not spin on it
                log.warning("accept failed (%s); retrying", exc)
                time.sleep(POLL_S)
                continue
            self._handoff.put((conn, address))
            with self._lock:
                spawn = self._idle_threads == 0  # else an idle thread takes it (and is no longer idle)
                if spawn:
                    self._threads += 1
                else:
                    self._idle_threads -= 1
            if spawn:
                try:
                    # _thread, not threading.Thread: Thread.start() waits until the new thread holds the GIL, which
                    # under load (128 busy connections) stalled this loop for each new connection of a burst.
                    _thread.start_new_thread(self._worker, ())
                except RuntimeError as exc:  # no thread left: it waits for a busy thread to come back for it
                    with self._lock:
                        self._threads -= 1
                    log.warning("cannot start a thread (%s)", exc)
            return True
        return False

    def _worker(self) -> None:
        # A thread per open connection, kept for the next one (starting threads under load cost more than the
        # requests); it ends after THREAD_IDLE_S without a connection, or when the server is closed.
        try:
            while True:
                try:
                    item = self._handoff.get(timeout=THREAD_IDLE_S)
                except queue.Empty:
                    with self._lock:
                        leave = self._idle_threads > 0 or self._closed  # else a connection is promised to us
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

    def _connection(self, conn: socket.socket, address: Any) -> None:
        with self._lock:
            if self._closed:  # accepted, then the server was closed before a thread took it
                conn.close()
                self._slots.release()
                return
            self._live[conn] = ("idle", time.monotonic())
            self.peak_connections = max(self.peak_connections, len(self._live))
        handler: RewardHandler | None = None
        try:
            handler = RewardHandler(conn, address, self)  # type: ignore[arg-type]  # runs setup, handle, finish
        except Exception:  # a defect; the connection is all it may cost
            log.error("connection failed:\n%s", traceback.format_exc())
        finally:
            linger = handler is None or handler.linger
            with self._lock:
                self._live.pop(conn, None)
            _close(conn, linger, self.limits.max_body_bytes + 65536)
            self._slots.release()

    def phase(self, conn: socket.socket, phase: str) -> None:
        """What an open connection is doing now: ``idle`` (waiting for a request), ``head`` (its first byte came,
        its headers not yet), ``body`` (a whole head came: reading, scoring, answering)."""
        with self._lock:
            if conn in self._live:
                self._live[conn] = (phase, time.monotonic())

    def _shed_one(self) -> None:
        """Close the connection that has waited longest for a request head, if it has waited ``shed_after_s``:
        a connection is waiting in the backlog and every slot is held. A request whose head has arrived is never
        shed: only clients that are idle or slow lose their slot, and they lose it first to the oldest."""
        now = time.monotonic()
        with self._lock:
            waiting = [(since, conn) for conn, (phase, since) in self._live.items()
                       if phase in ("idle", "head") and now - since >= self.limits.shed_after_s]
            if not waiting:
                return
            _, conn = min(waiting, key=lambda item: item[0])
            self._live[conn] = ("shed", now)  # not picked twice while its thread winds down
            self.shed += 1
        with contextlib.suppress(OSError):
            conn.shutdown(socket.SHUT_RD)  # its thread's read ends (ShedConnection); it answers and closes

    def is_shed(self, conn: socket.socket) -> bool:
        with self._lock:
            return self._live.get(conn, ("", 0.0))[0] == "shed"

    def count(self, status: int) -> None:
        with self._lock:
            self.counts[status] = self.counts.get(status, 0) + 1

    @property
    def connections(self) -> int:
        with self._lock:
            return len(self._live)

    def stop(self, reason: str) -> None:
        """The run is over (policy abort, failed runtime): answer nothing new, stop listening; requests already
        being scored finish and are answered."""
        with self._lock:
            if self.stopped_because is None:
                self.stopped_because = reason
        log.warning("shutting down: %s", reason)
        self._stop.set()
        threading.Thread(target=self._close_listener, daemon=True).start()

    def _close_listener(self) -> None:
        self._done.wait(timeout=10)
        with contextlib.suppress(OSError):
            self.socket.close()  # queued connections are refused now, not left waiting

    def shutdown(self) -> None:
        """Stop the accept loop and wait for it (like socketserver's); connections already open keep going."""
        self._stop.set()
        if self._serving.is_set():
            self._done.wait()

    def wait_idle(self, timeout_s: float) -> bool:
        """Wait until no connection is open (requests finish); False when some were still open at the timeout."""
        deadline = time.monotonic() + timeout_s
        while self.connections and time.monotonic() < deadline:
            time.sleep(0.05)
        return not self.connections

    def server_close(self) -> None:
        """Close the listening socket and every open connection (their threads end)."""
        self.shutdown()  # the accept loop first: it must not select on a closed socket
        with contextlib.suppress(OSError):
            self.socket.close()
        with self._lock:
            live = list(self._live)
        for conn in live:
            with contextlib.suppress(OSError):
                conn.shutdown(socket.SHUT_RDWR)
        with self._lock:
            self._closed = True
            threads = self._threads
        for _ in range(threads):
            self._handoff.put(None)  # every connection thread ends when it next looks for a connection


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
                        help="connections served at once; more wait in the listen backlog")
    parser.add_argument("--backlog", type=int, default=default.backlog, help="listen queue length")
    parser.add_argument("--max-body-bytes", type=int, default=default.max_body_bytes, help="larger bodies get 413")
    parser.add_argument("--max-batch", type=int, default=default.max_batch, help="samples per request; more get 413")
    parser.add_argument("--idle-timeout", type=float, default=default.idle_timeout_s,
                        help="seconds a connection may wait for its next request")
    parser.add_argument("--request-timeout", type=float, default=default.request_timeout_s,
                        help="seconds from a request's first byte to its whole body (else 408)")
    parser.add_argument("--secret-file", help=f"a file whose first line is the shared secret (or set ${SECRET_ENV} "
                                              f"or ${SECRET_FILE_ENV}; never the secret itself on the command line)")
    ns = parser.parse_args(argv)
    limits = Limits(ns.max_connections, ns.backlog, ns.max_body_bytes, ns.max_batch, ns.idle_timeout,
                    ns.request_timeout)
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
