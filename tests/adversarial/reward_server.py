"""Reward server: what a hostile or broken local HTTP client does to the OpenRLHF reward server.

Every case runs the real server (:func:`unirl.adapters.openrlhf_server.serve`) on a loopback socket with a real
reward spec (the built-in ``math_answer`` and ``numeric_closeness``) and talks to it over a raw socket, so nothing
a client library would tidy up (framing, encodings, header order) is hidden. An attack is contained when the server
answers it (a 4xx, a 503, or 505 for HTTP/2) instead of dropping the connection, hanging or shutting down, when no
malformed request was scored (it would count towards the reward error policy), and when a well-formed request
right after it still gets the right score.
"""

from __future__ import annotations

import contextlib
import functools
import json
import os
import resource
import socket
import struct
import threading
import time
from collections.abc import Callable, Iterator
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tests.adversarial import Case
from unirl.adapters import common
from unirl.adapters.openrlhf_requests import RUN_DATA_FILES, RunRows
from unirl.adapters.openrlhf_server import Limits, RewardServer, serve
from unirl.rewards.contract import Sample
from unirl.rewards.executor import RewardExecutor
from unirl.rewards.row_origin import tag_reference
from unirl.rewards.spec import RewardEntry, RewardPolicy, RewardRuntimeSpec

AREA = "reward server (hostile HTTP clients)"
# Short timeouts so slow attacks end in about a second; a small cap so "more than the cap" stays cheap.
LIMITS = Limits(max_connections=8, max_waiting=16, idle_timeout_s=1.0, request_timeout_s=1.5, max_body_bytes=1 << 20,
                max_batch=64)
SECRET = "unirl-test-secret-0123456789abcdef"
REPLY_TIMEOUT_S = 15.0  # a reply later than this is a hang (the slowest attack is answered after ~1.5 s)
PROMPT = "What is 3+4? Answer: "
GOOD = {"query": [PROMPT + "so \\boxed{7}</s>"], "prompts": [PROMPT], "labels": ["7"]}
ENTRIES = (RewardEntry("math_answer", "unirl.plugins.builtin_rewards.math_answer:math_answer",
                       components=("has_answer",),
                       inline=True),
           RewardEntry("numeric_closeness", "unirl.plugins.builtin_rewards.math_answer:numeric_closeness", weight=0.5,
                       inline=True))


def reward_spec(policy: RewardPolicy | None = None) -> RewardRuntimeSpec:
    return RewardRuntimeSpec(ENTRIES, policy or RewardPolicy(on_error="fallback", max_error_rate=1.0, workers=1))


@functools.cache
def expected_total() -> float:
    """The executor's own score for GOOD: what the server must answer."""
    with RewardExecutor(reward_spec()) as executor:
        [scored] = executor.score([Sample(prompt=PROMPT, completion="so \\boxed{7}", reference="7")])
    assert scored.total is not None and scored.total > 0
    return scored.total


@contextlib.contextmanager
def running(tmp: Path, *, limits: Limits = LIMITS, secret: str | None = None,
            policy: RewardPolicy | None = None, run_rows: RunRows | None = None) -> Iterator[RewardServer]:
    """The real server on an ephemeral loopback port, scoring with its own spec; torn down afterwards."""
    spec_path = reward_spec(policy).write(tmp / "reward_spec.json")
    previous = os.environ.get(common.SPEC_ENV)
    os.environ[common.SPEC_ENV] = str(spec_path)
    server = serve("127.0.0.1", 0, limits=limits, secret=secret, run_rows=run_rows)
    try:
        yield server
    finally:
        close_server(server)
        if previous is None:
            os.environ.pop(common.SPEC_ENV, None)
        else:
            os.environ[common.SPEC_ENV] = previous
        runtime = common._RUNTIMES.pop(("openrlhf", os.path.abspath(spec_path)), None)
        if runtime is not None:
            runtime.executor.close()


def close_server(server: RewardServer) -> None:
    """``shutdown()`` then ``server_close()``, without sitting out the accept loop's poll (``POLL_S``, a quarter of a
    second per server, and the suite starts about a hundred).

    The loop looks at its stop flag whenever ``select()`` returns: a connection made while ``shutdown()`` waits wakes
    it at once, and ``server_close()`` closes that connection with every other one still open.
    """
    waiter = threading.Thread(target=server.shutdown, name="close-server", daemon=True)
    waiter.start()
    address = server.server_address[:2]
    while waiter.is_alive():
        with contextlib.suppress(OSError):
            socket.create_connection(address, timeout=1).close()
        waiter.join(0.01)
    server.server_close()


def scored_calls(server: RewardServer) -> int:
    """Reward calls the server's executor made (0 while nothing reached scoring)."""
    runtime = common._RUNTIMES.get(("openrlhf", os.path.abspath(os.environ[common.SPEC_ENV])))
    return 0 if runtime is None else runtime.executor.stats.calls


# -- a raw HTTP client ----------------------------------------------------------------------------------------------
@dataclass
class Reply:
    status: int
    headers: dict[str, str]
    body: bytes

    def json(self) -> Any:
        return json.loads(self.body)


def request(body: bytes | dict[str, Any], *, method: str = "POST", path: str = "/get_reward",
            content_type: str | None = "application/json", headers: tuple[str, ...] = (),
            length: str | None = None) -> bytes:
    """One HTTP/1.1 request; ``length`` overrides Content-Length ("" leaves it out)."""
    data = json.dumps(body).encode() if isinstance(body, dict) else body
    lines = [f"{method} {path} HTTP/1.1", "Host: 127.0.0.1"]
    if content_type is not None:
        lines.append(f"Content-Type: {content_type}")
    if length is None:
        lines.append(f"Content-Length: {len(data)}")
    elif length:
        lines.append(f"Content-Length: {length}")
    lines.extend(headers)
    return ("\r\n".join(lines) + "\r\n\r\n").encode("latin-1") + data


class Connection:
    """A socket to the server that reads whole replies (status line, headers, Content-Length body)."""

    def __init__(self, server: RewardServer, timeout_s: float = REPLY_TIMEOUT_S) -> None:
        self.sock = socket.create_connection(server.server_address[:2], timeout=timeout_s)
        self.buffer = b""
        self.timeout_s = timeout_s

    def send(self, data: bytes) -> bool:
        """False when the server had already closed (it may have answered early: read that answer)."""
        try:
            self.sock.sendall(data)
            return True
        except (BrokenPipeError, ConnectionResetError):
            return False

    def trickle(self, data: bytes, pause_s: float) -> None:
        for i in range(len(data)):
            if not self.send(data[i:i + 1]):
                return
            time.sleep(pause_s)

    def _fill(self, what: str) -> None:
        try:
            chunk = self.sock.recv(65536)
        except TimeoutError:
            raise AssertionError(f"{what} did not come within {self.timeout_s:g} s: the server hangs") from None
        except ConnectionResetError:
            chunk = b""
        if not chunk:
            raise AssertionError(f"the connection closed before {what} came (got {self.buffer[:200]!r})")
        self.buffer += chunk

    def reply(self) -> Reply:
        while True:
            while b"\r\n\r\n" not in self.buffer:
                self._fill("an answer")
            head, self.buffer = self.buffer.split(b"\r\n\r\n", 1)
            status_line, *header_lines = head.decode("latin-1").split("\r\n")
            status = int(status_line.split()[1])
            headers = {}
            for line in header_lines:
                name, _, value = line.partition(":")
                headers[name.strip().lower()] = value.strip()
            if status == 100:  # interim answer to Expect: 100-continue
                continue
            length = int(headers.get("content-length", "0"))
            while len(self.buffer) < length:
                self._fill("the whole answer body")
            body, self.buffer = self.buffer[:length], self.buffer[length:]
            return Reply(status, headers, body)

    def closed_by_server(self) -> bool:
        """True once the server has closed this connection (EOF or reset) within the timeout."""
        try:
            while True:
                chunk = self.sock.recv(65536)
                if not chunk:
                    return True
        except ConnectionResetError:
            return True
        except TimeoutError:
            return False

    def close(self) -> None:
        self.sock.close()


def exchange(server: RewardServer, data: bytes) -> Reply:
    conn = Connection(server)
    try:
        conn.send(data)
        return conn.reply()
    finally:
        conn.close()


def assert_refused(reply: Reply, status: int | tuple[int, ...], field: str | None = None) -> None:
    allowed = (status,) if isinstance(status, int) else status
    assert reply.status in allowed, f"HTTP {reply.status} ({reply.body[:300]!r}); expected {allowed}"
    payload = reply.json()
    assert isinstance(payload.get("error"), str) and payload["error"], f"no error message in {payload}"
    if field is not None:
        assert payload.get("field") == field, f"field {payload.get('field')!r}, expected {field!r}: {payload}"


def assert_serves(server: RewardServer, *, secret: str | None = None) -> None:
    """The server is up and scores a well-formed request right."""
    assert server.stopped_because is None, f"the server stopped: {server.stopped_because}"
    path = f"/{secret}/get_reward" if secret else "/get_reward"
    reply = exchange(server, request(GOOD, path=path))
    assert reply.status == 200, f"a well-formed request got HTTP {reply.status}: {reply.body[:300]!r}"
    answer = reply.json()
    assert answer["rewards"] == [expected_total()] and answer["scores"] == [expected_total()], answer
    assert answer["extra_logs"]["math_answer"] == [1.0], answer


# -- cases ------------------------------------------------------------------------------------------------------------
def refused(data: bytes, status: int | tuple[int, ...], field: str | None = None, *, secret: str | None = None,
            limits: Limits = LIMITS) -> Callable[[Path], None]:
    def check(tmp: Path) -> None:
        with running(tmp, secret=secret, limits=limits) as server:
            assert_refused(exchange(server, data), status, field)
            assert scored_calls(server) == 0, "a refused request was scored (it would count towards the policy)"
            assert_serves(server, secret=secret)

    return check


def _deep(n: int, open_: bytes, close: bytes, inner: bytes = b"") -> bytes:
    return open_ * n + inner + close * n


BODIES: list[tuple[str, bytes | dict[str, Any], int, str | None]] = [
    ("malformed JSON (cut off)", b'{"query": ["a"', 400, None),
    ("malformed JSON (trailing garbage)", json.dumps(GOOD).encode() + b" x", 400, None),
    ("malformed JSON (single quotes)", b"{'query': ['a']}", 400, None),
    ("empty body", b"", 400, None),
    ("body is an array", b"[]", 422, None),
    ("body is a string", b'"query"', 422, None),
    ("body is null", b"null", 422, None),
    ("query missing", {"prompts": ["p"], "labels": ["7"]}, 422, "query"),
    ("query is null", {"query": None}, 422, "query"),
    ("query is a string", {"query": "What is 3+4? 7"}, 422, "query"),
    ("query is an object", {"query": {"0": "a"}}, 422, "query"),
    ("query item is a number", {"query": [7]}, 422, "query[0]"),
    ("query item is null", {"query": ["a", None]}, 422, "query[1]"),
    ("query item is a list", {"query": [["a"]]}, 422, "query[0]"),
    ("prompts is a string", {"query": ["a"], "prompts": "a"}, 422, "prompts"),
    ("prompts item is a number", {"query": ["a"], "prompts": [1]}, 422, "prompts[0]"),
    ("labels is an object", {"query": ["a"], "labels": {"0": "7"}}, 422, "labels"),
    ("label is an object", {"query": ["a"], "labels": [{"answer": 7}]}, 422, "labels[0]"),
    ("label is a boolean", {"query": ["a"], "labels": [True]}, 422, "labels[0]"),
    ("label is a list", {"query": ["a"], "labels": [[7]]}, 422, "labels[0]"),
    ("label overflows to infinity (1e999)", b'{"query": ["a"], "labels": [1e999]}', 422, "labels[0]"),
    ("label is a 5,000-digit integer", b'{"query": ["a"], "labels": [' + b"9" * 5000 + b"]}", 400, None),
    ("prompts longer than query", {"query": ["a"], "prompts": ["", ""]}, 422, "prompts"),
    ("labels shorter than query", {"query": ["a", "b"], "labels": ["7"]}, 422, "labels"),
    ("empty query list", {"query": []}, 422, "query"),
    ("empty lists everywhere", {"query": [], "prompts": [], "labels": []}, 422, "query"),
    ("query that does not contain its prompt", {"query": ["7</s>"], "prompts": [PROMPT]}, 422, "query[0]"),
    ("more samples than --max-batch", {"query": ["a"] * 65}, 413, "query"),
    ("100,000-deep array", _deep(100_000, b"[", b"]"), 400, None),
    ("100,000-deep array, never closed", b"[" * 100_000, 400, None),
    ("100,000-deep object as the query", b'{"query": ' + _deep(100_000, b'{"a": ', b"}", b"1") + b"}", 400, None),
    ("NaN literal", b'{"query": ["a"], "labels": [NaN]}', 400, None),
    ("-Infinity literal", b'{"query": ["a"], "labels": [-Infinity]}', 400, None),
    ("duplicate keys", b'{"query": ["a"], "query": ["b"]}', 400, None),
    ("non-UTF-8 body (latin-1)", '{"query": ["é"]}'.encode("latin-1"), 400, None),
    ("UTF-16 body with a BOM", json.dumps(GOOD).encode("utf-16"), 400, None),
    ("lone surrogate escape in the query", b'{"query": ["\\ud800 7"]}', 422, "query[0]"),
]

HEADS: list[tuple[str, bytes, int | tuple[int, ...], str | None]] = [
    ("Content-Length missing", request(GOOD, length=""), 411, "Content-Length"),
    ("Content-Length negative", request(GOOD, length="-5"), 400, "Content-Length"),
    ("Content-Length not a number", request(GOOD, length="twelve"), 400, "Content-Length"),
    ("Content-Length with a plus sign", request(GOOD, length="+12"), 400, "Content-Length"),
    ("Content-Length in Arabic-Indic digits", request(GOOD, length="@@").replace(b"@@", "١٢".encode()), 400,
     "Content-Length"),
    ("Content-Length of a terabyte", request(b'{"query": ["', length=str(1 << 40)), 413, "Content-Length"),
    ("body one byte over --max-body-bytes", request(b" " * ((1 << 20) + 1)), 413, "Content-Length"),
    ("two Content-Length headers", request(GOOD, headers=("Content-Length: 5",)), 400, "Content-Length"),
    ("chunked Transfer-Encoding", request(b"5\r\nhello\r\n0\r\n\r\n", length="",
                                          headers=("Transfer-Encoding: chunked",)), 411, "Transfer-Encoding"),
    ("Transfer-Encoding and Content-Length together (smuggling)",
     request(GOOD, headers=("Transfer-Encoding: chunked",)), 400, "Transfer-Encoding"),
    ("Content-Type text/plain (a cross-site form post)", request(GOOD, content_type="text/plain"), 415,
     "Content-Type"),
    ("Content-Type form-urlencoded", request(GOOD, content_type="application/x-www-form-urlencoded"), 415,
     "Content-Type"),
    ("no Content-Type", request(GOOD, content_type=None), 415, "Content-Type"),
    ("GET", request(b"", method="GET"), 405, None),
    ("PUT", request(GOOD, method="PUT"), 405, None),
    ("DELETE", request(b"", method="DELETE"), 405, None),
    ("OPTIONS (a CORS preflight)", request(b"", method="OPTIONS"), 405, None),
    ("HEAD", request(b"", method="HEAD"), 405, None),
    ("unknown method BREW", request(GOOD, method="BREW"), 405, None),
    ("wrong path /", request(GOOD, path="/"), 404, None),
    ("wrong path /get_reward/extra", request(GOOD, path="/get_reward/extra"), 404, None),
    ("path traversal /a/../get_reward", request(GOOD, path="/a/../get_reward"), 404, None),
    ("secret path segment on a server without a secret", request(GOOD, path=f"/{SECRET}/get_reward"), 404, None),
    ("request line over 64 KiB", request(GOOD, path="/" + "a" * 70_000), 414, None),
    ("header line over 64 KiB", request(GOOD, headers=("X-Big: " + "a" * 70_000,)), 431, None),
    ("101 headers", request(GOOD, headers=tuple(f"X-{i}: {i}" for i in range(101))), 431, None),
    ("HTTP/2 connection preface", b"PRI * HTTP/2.0\r\n\r\nSM\r\n\r\n", 505, None),
    ("HTTP/0.9-style request line (no version)", b"GET /get_reward\r\n\r\n", 405, None),
    ("malformed request line", b"POST\r\n\r\n", 400, None),
    ("malformed HTTP version", b"POST /get_reward HTTP/x.y\r\n\r\n", 400, None),
    ("only empty lines", b"\r\n" * 8, 400, None),
    ("header without a colon", request(GOOD, headers=("this is not a header",)), 400, None),
    ("header name with a space before the colon", request(GOOD, headers=("Content-Length : 5",)), 400, None),
]

SECRET_HEADS: list[tuple[str, bytes]] = [
    ("secret set, none sent", request(GOOD)),
    ("wrong secret in the path", request(GOOD, path="/not-the-secret-0123456789/get_reward")),
    ("the secret with a suffix in the path", request(GOOD, path=f"/{SECRET}x/get_reward")),
    ("a prefix of the secret in the path", request(GOOD, path=f"/{SECRET[:-1]}/get_reward")),
    ("wrong Bearer token", request(GOOD, headers=("Authorization: Bearer not-the-secret-0123456789",))),
    ("Bearer token with non-ASCII bytes", request(GOOD, headers=("Authorization: Bearer s\xe9cret\xff",))),
    ("Basic credentials instead of Bearer", request(GOOD, headers=(f"Authorization: Basic {SECRET}",))),
    ("empty Authorization header", request(GOOD, headers=("Authorization:",))),
]


def _trickled_headers(tmp: Path) -> None:
    """The request line and headers one byte every 0.2 s (slowloris): the whole-request deadline ends it, a 408."""
    with running(tmp) as server:
        conn = Connection(server)
        stop = threading.Event()
        try:
            threading.Thread(target=lambda: _drip(conn, request(GOOD), stop), daemon=True).start()
            reply = conn.reply()
        finally:
            stop.set()
            conn.close()
        assert_refused(reply, 408)
        assert_serves(server)


def _drip(conn: Connection, data: bytes, stop: threading.Event) -> None:
    for i in range(len(data)):
        if stop.is_set() or not conn.send(data[i:i + 1]):
            return
        time.sleep(0.2)


def _slow_body(tmp: Path) -> None:
    """Headers at once, then the body a byte at a time: the whole-request deadline ends it with a 408."""
    with running(tmp) as server:
        data = request(GOOD)
        head, body = data.split(b"\r\n\r\n", 1)
        conn = Connection(server)
        try:
            conn.send(head + b"\r\n\r\n")
            stop = threading.Event()
            threading.Thread(target=lambda: _drip(conn, body, stop), daemon=True).start()
            reply = conn.reply()
            stop.set()
        finally:
            conn.close()
        assert_refused(reply, 408)
        assert_serves(server)


def _lying_length_high(tmp: Path) -> None:
    """Content-Length says 1000, 10 bytes come, then nothing: a 408 at the deadline, not a thread held forever."""
    with running(tmp) as server:
        assert_refused(exchange(server, request(b'{"query": ', length="1000")), 408)
        assert_serves(server)


def _lying_length_low(tmp: Path) -> None:
    """Content-Length covers a good body; what follows is read as the next request and refused on its own."""
    with running(tmp) as server:
        conn = Connection(server)
        try:
            conn.send(request(GOOD) + b"garbage after the body\r\n\r\n")
            first, second = conn.reply(), conn.reply()
        finally:
            conn.close()
        assert first.status == 200 and first.json()["rewards"] == [expected_total()], first
        assert_refused(second, 400)
        assert_serves(server)


def _half_close_mid_body(tmp: Path) -> None:
    """The client sends half the body and shuts its side: a 400 (short body) it can still read."""
    with running(tmp) as server:
        conn = Connection(server)
        try:
            data = request(GOOD)
            conn.send(data[: len(data) - 10])
            conn.sock.shutdown(socket.SHUT_WR)
            reply = conn.reply()
        finally:
            conn.close()
        assert_refused(reply, 400)
        assert_serves(server)


def _cut_request_line(tmp: Path) -> None:
    """The client sends half a request line and shuts its side: a 400 it can still read."""
    with running(tmp) as server:
        conn = Connection(server)
        try:
            conn.send(b"POST /get_re")
            conn.sock.shutdown(socket.SHUT_WR)
            reply = conn.reply()
        finally:
            conn.close()
        assert_refused(reply, 400)
        assert_serves(server)


def _reset_mid_request(tmp: Path) -> None:
    """The client resets the connection mid-body (nobody to answer): the server goes on serving."""
    with running(tmp) as server:
        for _ in range(20):
            conn = Connection(server)
            conn.send(request(GOOD)[:-5])
            conn.sock.setsockopt(socket.SOL_SOCKET, socket.SO_LINGER, struct.pack("ii", 1, 0))  # close = RST
            conn.close()
        assert_serves(server)
        assert scored_calls(server) == len(ENTRIES), "a cut-off request was scored"


def _expect_continue_oversized(tmp: Path) -> None:
    """Expect: 100-continue with a body over the cap: a 413 before the client sends a byte of it."""
    with running(tmp) as server:
        conn = Connection(server)
        try:
            conn.send(request(b"", length=str(1 << 30), headers=("Expect: 100-continue",)))
            reply = conn.reply()
        finally:
            conn.close()
        assert_refused(reply, 413, "Content-Length")
        assert_serves(server)


def _idle_connections_over_the_cap(tmp: Path) -> None:
    """3x the waiting cap of connections that send nothing: the server holds at most its caps, closes each idle one
    (after its idle timeout, or shed for a newer one), and a real request made meanwhile is answered."""
    with running(tmp) as server:
        idle = [Connection(server) for _ in range(3 * LIMITS.max_waiting)]
        try:
            assert_serves(server)
            assert all(c.closed_by_server() for c in idle), "an idle connection was never closed"
        finally:
            for c in idle:
                c.close()
        cap = LIMITS.max_waiting + LIMITS.max_connections
        assert server.peak_connections <= cap, f"{server.peak_connections} connections held at once, over {cap}"
        assert_serves(server)


def _slowloris_crowd(tmp: Path) -> None:
    """2x the cap of connections each trickling headers: each gets its 408 (or a 503 when it was shed to make room
    for a waiting connection), and a real request still gets in."""
    with running(tmp) as server:
        data = request(GOOD)
        conns = [Connection(server) for _ in range(2 * LIMITS.max_connections)]
        stop = threading.Event()
        try:
            for c in conns:
                threading.Thread(target=lambda c=c: _drip(c, data, stop), daemon=True).start()
            assert_serves(server)
            stop.set()  # the 408s are sent; stop dripping so each close is clean
            replies = [c.reply() for c in conns]
        finally:
            stop.set()
            for c in conns:
                c.close()
        assert all(r.status in (408, 503) for r in replies), [r.status for r in replies]
        assert_serves(server)


SLOWLORIS_LIMITS = Limits(max_connections=8, max_waiting=32, idle_timeout_s=15.0, request_timeout_s=30.0,
                          header_timeout_s=10.0, max_body_bytes=1 << 20, max_batch=64)
"""The default deadlines (tens of seconds), over small caps: what a slow client could hold a slot for."""


def _slowloris(n: int) -> Callable[[Path], None]:
    """``n`` clients that send a header byte every 2 s, under the default deadlines: a slow client never holds a
    worker (it waits in the reception stage), and past ``max_waiting`` the one that waited longest is shed for a
    new connection, so a real request is answered in seconds, not after a slow client's 30 s deadline."""
    def check(tmp: Path) -> None:
        with running(tmp, limits=SLOWLORIS_LIMITS) as server:
            data = request(GOOD)
            stop = threading.Event()
            conns = [Connection(server) for _ in range(n)]

            def drip(conn: Connection) -> None:
                for i in range(len(data)):
                    if stop.wait(2.0) or not conn.send(data[i:i + 1]):
                        return

            try:
                for c in conns:
                    threading.Thread(target=drip, args=(c,), daemon=True).start()
                time.sleep(1.5)  # every slow client is connected and has sent a byte
                start = time.monotonic()
                for _ in range(3):
                    assert_serves(server)
                waited = (time.monotonic() - start) / 3
            finally:
                stop.set()
                for c in conns:
                    c.close()
            assert waited < 2.0, f"a real request waited {waited:.1f} s"
            if n > SLOWLORIS_LIMITS.max_waiting:
                assert server.shed > 0
    return check


def _run_rows(tmp: Path) -> tuple[RunRows, str]:
    """The run's exported rows beside its spec (what a launch writes), and the label of its row 0 (answer 7)."""
    label = tag_reference("7", "train", 0)
    path = tmp / RUN_DATA_FILES["train"]
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({"input": PROMPT, "label": label, "datasource": "arith"}) + "\n"
                    + json.dumps({"input": "1+1=", "label": tag_reference("2", "train", 1), "datasource": "arith"})
                    + "\n")
    return RunRows(tmp), label


def _foreign_labels_cannot_stop_the_run(tmp: Path) -> None:
    """The review's attack: six well-formed requests with a non-numeric label used to push the reward error rate
    over 5 % and stop the server (exit 70). A label that is not one of the run's rows is the client's input: a 422,
    never scored, never counted; so is a forged tag (a row's place with another reference). The run's own row is
    scored."""
    rows, label = _run_rows(tmp)
    policy = RewardPolicy(on_error="fallback", max_error_rate=0.05, min_calls=1, workers=1)
    with running(tmp, policy=policy, run_rows=rows) as server:
        forged = tag_reference("not a number", "train", 0)
        for bad in ["seven", "", forged, tag_reference("7", "train", 5), *["abc"] * 6]:
            body = {"query": [PROMPT + "so \\boxed{7}</s>"], "prompts": [PROMPT], "labels": [bad]}
            assert_refused(exchange(server, request(body)), 422, "labels")
        assert scored_calls(server) == 0, f"{scored_calls(server)} reward calls made for foreign labels"
        reply = exchange(server, request({**GOOD, "labels": [label]}))
        assert reply.status == 200 and reply.json()["rewards"] == [expected_total()], reply.body[:300]
        assert server.stopped_because is None


MALFORMED = [data for _, data, _, _ in HEADS[:12]] + [request(body) for _, body, _, _ in BODIES]


def _malformed_under_abort_policy(tmp: Path) -> None:
    """The review's attack: bad requests used to be scored and counted, so six of them under an abort policy shut
    the server down. Now none is scored: an abort-on-first-error policy is untouched by every malformed request."""
    with running(tmp, policy=RewardPolicy(on_error="abort", workers=1)) as server:
        for data in MALFORMED:
            reply = exchange(server, data)
            assert 400 <= reply.status < 500, f"HTTP {reply.status} for {data[:120]!r}"
        assert scored_calls(server) == 0, f"{scored_calls(server)} reward calls made for malformed requests"
        assert_serves(server)


def _malformed_under_error_rate_policy(tmp: Path) -> None:
    """max_error_rate=0 from the first call: malformed requests never reach the window the rate is measured on."""
    with running(tmp, policy=RewardPolicy(on_error="fallback", max_error_rate=0.0, min_calls=1, workers=1)) as server:
        for _ in range(3):
            for data in MALFORMED[:20]:
                exchange(server, data)
            assert_serves(server)
        assert scored_calls(server) == 3 * len(ENTRIES)


def _flood(tmp: Path) -> None:
    """Many concurrent clients at 25x the cap, a third well-formed, the rest malformed: every one is answered
    (good ones with the right score), none dropped, and the server holds no more than its cap."""
    clients = min(200, resource.getrlimit(resource.RLIMIT_NOFILE)[0] // 4)
    with running(tmp) as server:
        good = request(GOOD)

        def one(i: int) -> tuple[bool, Reply]:
            is_good = i % 3 == 0
            return is_good, exchange(server, good if is_good else MALFORMED[i % len(MALFORMED)])

        with ThreadPoolExecutor(clients) as pool:
            results = list(pool.map(one, range(clients)))
        for is_good, reply in results:
            if is_good:
                assert reply.status == 200 and reply.json()["rewards"] == [expected_total()], reply
            else:
                assert 400 <= reply.status < 500, reply
        assert server.peak_busy <= LIMITS.max_connections
        assert server.peak_connections <= LIMITS.max_connections + LIMITS.max_waiting
        assert_serves(server)


def _pipelined(tmp: Path) -> None:
    """Three requests in one packet (good, malformed, good) on a kept-alive connection: three answers, in order."""
    with running(tmp) as server:
        conn = Connection(server)
        try:
            conn.send(request(GOOD) + request({"query": []}) + request(GOOD))
            replies = [conn.reply() for _ in range(3)]
        finally:
            conn.close()
        assert [r.status for r in replies] == [200, 422, 200], [(r.status, r.body[:100]) for r in replies]
        assert replies[2].json()["rewards"] == [expected_total()]
        assert_serves(server)


def _slow_attacks() -> list[Case]:
    return [
        Case("slowloris: headers trickled a byte every 0.2 s", _trickled_headers),
        Case("slowloris: body trickled a byte every 0.2 s", _slow_body),
        Case("slowloris: twice the cap of trickling connections", _slowloris_crowd),
        Case("slowloris: 3x the worker cap at the default 10/30 s deadlines", _slowloris(24)),
        Case("slowloris: 3x the waiting cap at the default 10/30 s deadlines (shed)", _slowloris(96)),
        Case("Content-Length lies high (claims 1000, sends 10, waits)", _lying_length_high),
        Case("TLS handshake bytes sent to the plain-HTTP port",
             refused(b"\x16\x03\x01\x02\x00\x01\x00\x01\xfc\x03\x03" + bytes(range(32)), (400, 408))),
    ]


CASES: list[Case] = [
    *[Case(name, refused(request(body), status, field)) for name, body, status, field in BODIES],
    *[Case(name, refused(data, status, field)) for name, data, status, field in HEADS],
    *[Case(name, refused(data, 401, secret=SECRET)) for name, data in SECRET_HEADS],
    *_slow_attacks(),
    Case("Content-Length lies low (bytes after the body)", _lying_length_low),
    Case("client shuts its side mid-body", _half_close_mid_body),
    Case("client shuts its side mid-request-line", _cut_request_line),
    Case("client resets mid-request, 20 times", _reset_mid_request),
    Case("Expect: 100-continue with a 1 GiB body", _expect_continue_oversized),
    Case("idle connections: 3x the cap, sending nothing", _idle_connections_over_the_cap),
    Case("the 6-bad-requests shutdown: malformed requests under on_error=abort", _malformed_under_abort_policy),
    Case("malformed requests under max_error_rate=0, min_calls=1", _malformed_under_error_rate_policy),
    Case("six well-formed requests with labels that are not the run's rows (and forged tags)",
         _foreign_labels_cannot_stop_the_run),
    Case("concurrent flood: 25x the cap, good and malformed mixed", _flood),
    Case("pipelined requests, one malformed between two good", _pipelined),
]
