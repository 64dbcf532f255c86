"""Load test of the OpenRLHF reward server on loopback: requests/s, p50/p99 and failed requests.

    python benchmarks/reward_server.py [--requests 3000] [--seconds 30] [--servers before,hardened,aiohttp]
        [--before-rev REV] [--slow-clients 300] [--slowloris 300,1100]

Each server runs in its own process (as it does beside OpenRLHF), scoring with a real spec: the built-in
``math_answer`` (trusted, so it scores in the server's thread, which makes the server the thing measured). The
load generator is an asyncio client in this process that sends OpenRLHF 0.11.2's request (``{"query",
"prompts", "labels"}``, one sample, ``Content-Type: application/json``) from ``concurrency`` tasks at once,
each task waiting for its answer before the next; every answer is checked against the executor's own score.

- ``new connection``: a TCP connection per request, which is what OpenRLHF's client does (a new aiohttp session
  per request); ``keep-alive``: connections reused (other clients).
- slow clients: ``--slow-clients N`` connections beside the load that each send their request a byte every 2 s
  and reconnect whenever the server closes them (slowloris); ``--slowloris`` also times one legitimate request
  after another (20 of them) while that many slow clients hold their connections.
- servers: ``before`` (the server at ``--before-rev``, default git HEAD, if it differs from the working tree),
  ``hardened`` (this tree's
  ``unirl.adapters.openrlhf_server``), ``hardened, cap 32`` (128 clients over a 32-connection cap: the rest wait
  in the listen backlog) and ``aiohttp`` (aiohttp's web server with the same validation and scoring, when
  aiohttp is installed: it is an OpenRLHF dependency, not one of unirl's core).

Bounded: at most ``--requests`` requests (after 50 warm-up) or ``--seconds`` per trial, ``--repeats`` trials per
row (interleaved; medians reported), 30 s per request. Also reported: the server process's CPU time per request.
A failed request is any error, a status other than 200 or a wrong score. Writes benchmarks/results/reward_server.json.
"""

from __future__ import annotations

import argparse
import asyncio
import functools
import json
import os
import re
import select
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections import Counter
from pathlib import Path
from typing import Any

REPO = Path(__file__).resolve().parents[1]
sys.path.insert(0, str(REPO))

from benchmarks._common import save  # noqa: E402
from unirl.rewards.contract import Sample  # noqa: E402
from unirl.rewards.executor import RewardExecutor  # noqa: E402
from unirl.rewards.spec import RewardEntry, RewardPolicy, RewardRuntimeSpec  # noqa: E402

SPEC = RewardRuntimeSpec((RewardEntry("math_answer", "unirl.plugins.builtin_rewards.math_answer:math_answer",
                                      components=("has_answer",), inline=True),),
                         RewardPolicy(on_error="fallback", workers=1))
WARMUP = 50
REQUEST_TIMEOUT_S = 30.0
URL_RE = re.compile(r"http://([0-9.]+):([0-9]+)/")


def samples(n: int = 16) -> list[Sample]:
    out = []
    for i in range(n):
        a, b = 17 * i + 3, 31 * i + 5
        answer = a + b if i % 2 == 0 else a + b + 1  # half right
        out.append(Sample(prompt=f"What is {a}+{b}? ", completion=f"Adding them gives \\boxed{{{answer}}}.",
                          reference=str(a + b)))
    return out


def requests_and_expected() -> list[tuple[bytes, float]]:
    with RewardExecutor(SPEC) as executor:
        scored = executor.score(samples())
    out = []
    for s, r in zip(samples(), scored, strict=True):
        body = json.dumps({"query": [s.prompt + s.completion + "</s>"], "prompts": [s.prompt],
                           "labels": [s.reference]}).encode()
        assert r.total is not None
        out.append((body, r.total))
    return out


# -- the servers ----------------------------------------------------------------------------------------------------
def serve_aiohttp(spec: str) -> None:
    """aiohttp's web server with unirl's validation and scoring (scoring in threads: it blocks)."""
    from concurrent.futures import ThreadPoolExecutor

    from aiohttp import web

    from unirl.adapters.common import SPEC_ENV
    from unirl.adapters.openrlhf import score_queries
    from unirl.adapters.openrlhf_requests import RequestError, parse_batch

    os.environ[SPEC_ENV] = spec
    pool = ThreadPoolExecutor(64)

    async def get_reward(request: web.Request) -> web.Response:
        body = await request.read()  # client_max_size answers 413 above the cap
        try:
            batch = parse_batch(body, 1024)
        except RequestError as exc:
            return web.json_response(exc.payload(), status=exc.status)
        answer = await asyncio.get_running_loop().run_in_executor(pool, score_queries, batch.queries, batch.prompts,
                                                                  batch.labels)
        return web.Response(body=json.dumps(answer).encode(), content_type="application/json")

    async def run() -> None:
        app = web.Application(client_max_size=8 << 20)
        app.router.add_post("/get_reward", get_reward)
        runner = web.AppRunner(app, access_log=None, keepalive_timeout=15)
        await runner.setup()
        site = web.TCPSite(runner, "127.0.0.1", 0, backlog=1024)
        await site.start()
        host, port = runner.addresses[0][:2]
        print(f"aiohttp reward server on http://{host}:{port}/get_reward", flush=True)
        await asyncio.Event().wait()

    asyncio.run(run())


def start(command: list[str], env: dict[str, str]) -> tuple[subprocess.Popen[str], tuple[str, int]]:
    proc = subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, **env})
    assert proc.stdout is not None
    deadline = time.monotonic() + 60
    while time.monotonic() < deadline:
        ready, _, _ = select.select([proc.stdout], [], [], 1.0)
        if ready:
            line = proc.stdout.readline()
            found = URL_RE.search(line)
            if found:
                return proc, (found.group(1), int(found.group(2)))
            if not line and proc.poll() is not None:
                break
    stop(proc)
    raise RuntimeError(f"{command} did not start: {proc.stderr.read() if proc.stderr else ''}")


def stop(proc: subprocess.Popen[str]) -> None:
    proc.terminate()  # our own child, by its Popen handle
    try:
        proc.wait(timeout=10)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


# -- the load -------------------------------------------------------------------------------------------------------
async def _read_answer(reader: asyncio.StreamReader) -> tuple[int, bytes, bool]:
    status_line = await reader.readline()
    if not status_line:
        raise ConnectionError("closed without an answer")
    status = int(status_line.split()[1])
    length, close = 0, False
    while True:
        line = await reader.readline()
        if line in (b"\r\n", b"\n", b""):
            break
        name, _, value = line.decode("latin-1").partition(":")
        if name.strip().lower() == "content-length":
            length = int(value)
        elif name.strip().lower() == "connection" and value.strip().lower() == "close":
            close = True
    return status, await reader.readexactly(length), close


async def _load(address: tuple[str, int], bodies: list[tuple[bytes, float]], concurrency: int, total: int,
                seconds: float, keep_alive: bool) -> dict[str, Any]:
    host, port = address
    requests = [(b"POST /get_reward HTTP/1.1\r\nHost: %s:%d\r\nContent-Type: application/json\r\n"
                 b"Content-Length: %d\r\n%s\r\n" % (host.encode(), port, len(body),
                                                    b"" if keep_alive else b"Connection: close\r\n") + body, want)
                for body, want in bodies]
    latencies: list[float] = []
    failures: Counter[str] = Counter()

    async def one(conn: list[Any], i: int) -> None:
        data, want = requests[i % len(requests)]
        start = time.perf_counter()
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S):
                if not conn:
                    conn.extend(await asyncio.open_connection(host, port))
                reader, writer = conn
                writer.write(data)
                status, body, close = await _read_answer(reader)
            if status != 200:
                failures[f"HTTP {status}"] += 1
            elif json.loads(body)["rewards"] != [want]:
                failures["wrong score"] += 1
            else:
                latencies.append(time.perf_counter() - start)
            if close or not keep_alive:
                _drop(conn)
        except Exception as exc:
            failures[type(exc).__name__] += 1
            _drop(conn)

    async def phase(n: int, clients: int, limit_s: float) -> float:
        issued, deadline = 0, time.perf_counter() + limit_s

        async def client() -> None:
            nonlocal issued
            conn: list[Any] = []
            while issued < n and time.perf_counter() < deadline:
                issued += 1
                await one(conn, issued)
            _drop(conn)

        started = time.perf_counter()
        await asyncio.gather(*(client() for _ in range(clients)))
        return started

    await phase(WARMUP, min(concurrency, WARMUP), seconds)  # threads, caches, first connections: not counted
    latencies.clear()
    failures.clear()
    started = await phase(total, concurrency, seconds)
    elapsed = time.perf_counter() - started
    done = len(latencies) + sum(failures.values())
    ordered = sorted(latencies) or [float("nan")]
    return {"concurrency": concurrency, "requests": done, "failed": sum(failures.values()), "failures": dict(failures),
            "seconds": round(elapsed, 2), "requests_per_s": round(done / elapsed, 1),
            "p50_ms": round(1000 * statistics.median(ordered), 2),
            "p99_ms": round(1000 * ordered[min(len(ordered) - 1, int(0.99 * len(ordered)))], 2),
            "max_ms": round(1000 * ordered[-1], 2)}


async def _slow_client(host: str, port: int, stop: asyncio.Event, counts: Counter[str]) -> None:
    """A slowloris client: a well-formed request sent a byte every 2 s; reconnects whenever it is closed."""
    data = (b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: 2\r\n\r\n{}")
    while not stop.is_set():
        try:
            reader, writer = await asyncio.open_connection(host, port)
        except OSError:
            counts["refused"] += 1
            await asyncio.sleep(0.5)
            continue
        counts["connections"] += 1
        try:
            for i in range(len(data)):
                if stop.is_set() or reader.at_eof():
                    break
                writer.write(data[i:i + 1])
                await writer.drain()
                try:
                    async with asyncio.timeout(2.0):
                        if await reader.read(65536) == b"":
                            counts["closed by the server"] += 1
                            break
                        counts["answered"] += 1
                        break
                except TimeoutError:
                    pass
        except OSError:
            counts["reset"] += 1
        finally:
            writer.close()


async def _with_slow_clients(address: tuple[str, int], slow: int, work: Any) -> tuple[Any, dict[str, int]]:
    """``work()`` while ``slow`` slowloris clients hold connections (opened first, 3 s before the work starts)."""
    stop = asyncio.Event()
    counts: Counter[str] = Counter()
    tasks = [asyncio.create_task(_slow_client(*address, stop, counts)) for _ in range(slow)]
    if slow:
        await asyncio.sleep(3.0)
    try:
        result = await work()
    finally:
        stop.set()
        for task in tasks:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)
    return result, dict(counts)


async def _legitimate_latency(address: tuple[str, int], body: tuple[bytes, float], n: int = 20) -> dict[str, Any]:
    """One OpenRLHF-style request at a time (a new connection each), timed from connect to answer."""
    host, port = address
    data = (b"POST /get_reward HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\nContent-Length: %d\r\n"
            b"Connection: close\r\n\r\n" % len(body[0]) + body[0])
    latencies, failures = [], Counter[str]()
    for _ in range(n):
        start = time.perf_counter()
        try:
            async with asyncio.timeout(REQUEST_TIMEOUT_S * 2):
                reader, writer = await asyncio.open_connection(host, port)
                writer.write(data)
                status, answer, _ = await _read_answer(reader)
                writer.close()
            if status == 200 and json.loads(answer)["rewards"] == [body[1]]:
                latencies.append(time.perf_counter() - start)
            else:
                failures[f"HTTP {status}"] += 1
        except Exception as exc:
            failures[type(exc).__name__] += 1
    ordered = sorted(latencies) or [float("nan")]
    return {"requests": n, "failed": sum(failures.values()), "failures": dict(failures),
            "p50_ms": round(1000 * statistics.median(ordered), 1), "max_ms": round(1000 * ordered[-1], 1)}


def _drop(conn: list[Any]) -> None:
    if conn:
        conn[1].close()
        conn.clear()


def _cpu_s(pid: int) -> float:
    """User + system CPU seconds of the server process (Linux /proc; its threads included)."""
    fields = Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()
    return (int(fields[11]) + int(fields[12])) / os.sysconf("SC_CLK_TCK")


def _line(name: str, keep_alive: bool, row: dict[str, Any]) -> str:
    return (f"{name:<32} {'keep-alive' if keep_alive else 'new connection':<15} c={row['concurrency']:<4} "
            f"{row['requests_per_s']:>8} req/s  p50 {row['p50_ms']:>7} ms  p99 {row['p99_ms']:>8} ms  "
            f"server CPU {row['server_cpu_us_per_request']:>5} us/req  failed {row['failed']}"
            f"{' ' + str(row['failures']) if row['failed'] else ''}")


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=(__doc__ or "").split("\n")[0])
    parser.add_argument("--requests", type=int, default=3000, help="per row, after the warm-up")
    parser.add_argument("--seconds", type=float, default=30.0, help="per row, at most")
    parser.add_argument("--repeats", type=int, default=3, help="trials per row (medians are reported)")
    parser.add_argument("--servers", default="before,hardened,hardened-cap32,aiohttp")
    parser.add_argument("--before-rev", default="HEAD", help="the git revision whose server is 'before'")
    parser.add_argument("--slow-clients", type=int, default=0, help="slowloris clients beside the load")
    parser.add_argument("--slowloris", default="", help="comma list: legitimate-request latency beside this many "
                                                         "slow clients (e.g. 300,1100)")
    parser.add_argument("--serve-aiohttp", metavar="SPEC", help=argparse.SUPPRESS)  # the aiohttp server process
    ns = parser.parse_args(argv)
    if ns.serve_aiohttp:
        serve_aiohttp(ns.serve_aiohttp)
        return 0
    wanted = ns.servers.split(",")
    bodies = requests_and_expected()
    rows: list[dict[str, Any]] = []
    keep = Path(tempfile.mkdtemp(prefix="unirl-bench-server-code-"))
    with tempfile.TemporaryDirectory(prefix="unirl-bench-server-") as tmp:
        spec = str(SPEC.write(Path(tmp) / "reward_spec.json"))
        env = {"PYTHONPATH": str(REPO), "UNIRL_REWARD_SPEC": spec}
        server_cmd = [sys.executable, "-m", "unirl.adapters.openrlhf_server", "--spec", spec, "--port", "0"]
        servers: list[tuple[str, list[str], list[bool]]] = []
        if "before" in wanted:
            head = subprocess.run(["git", "show", f"{ns.before_rev}:unirl/adapters/openrlhf_server.py"], cwd=REPO,
                                  capture_output=True, text=True)
            current = (REPO / "unirl/adapters/openrlhf_server.py").read_text()
            if head.returncode == 0 and head.stdout != current:
                before = keep / "openrlhf_server_before.py"  # both stages below start it
                before.write_text(head.stdout)
                servers.append((f"before (git {ns.before_rev})",
                                [sys.executable, str(before), "--spec", spec, "--port", "0"], [False]))
        if "hardened" in wanted:
            servers.append(("hardened", server_cmd, [False, True]))
        if "hardened-cap32" in wanted:
            servers.append(("hardened, --max-connections 32", [*server_cmd, "--max-connections", "32"], [False]))
        if "aiohttp" in wanted:
            try:
                import aiohttp  # noqa: F401

                servers.append(("aiohttp web server", [sys.executable, __file__, "--serve-aiohttp", spec],
                                [False, True]))
            except ImportError:
                print("aiohttp is not installed: skipping that server")
        configs = [(name, command, keep_alive, concurrency) for name, command, modes in servers
                   for keep_alive in modes for concurrency in (32, 128)]
        trials: dict[int, list[dict[str, Any]]] = {i: [] for i in range(len(configs))}
        for rep in range(ns.repeats):  # interleaved, so a busy moment of this shared machine hits every server alike
            for i, (name, command, keep_alive, concurrency) in enumerate(configs):
                proc, address = start(command, env)  # a fresh server per trial: no state carried over
                try:
                    cpu_before = _cpu_s(proc.pid)
                    trial, slow_counts = asyncio.run(_with_slow_clients(address, ns.slow_clients, functools.partial(
                        _load, address, bodies, concurrency, ns.requests, ns.seconds, keep_alive)))
                    trial["slow_clients"] = {"n": ns.slow_clients, **slow_counts}
                    trial["server_cpu_us_per_request"] = round(
                        1e6 * (_cpu_s(proc.pid) - cpu_before) / max(1, trial["requests"] + WARMUP))
                finally:
                    stop(proc)
                trials[i].append(trial)
                print(f"[{rep + 1}/{ns.repeats}] {_line(name, keep_alive, trial)}", flush=True)
        for i, (name, _, keep_alive, concurrency) in enumerate(configs):
            runs = trials[i]
            failures: Counter[str] = Counter()
            for t in runs:
                failures.update(t["failures"])
            rows.append({"server": name, "connections": "keep-alive" if keep_alive else "new connection",
                         "concurrency": concurrency, "trials": len(runs),
                         "requests": sum(t["requests"] for t in runs), "failed": sum(t["failed"] for t in runs),
                         "failures": dict(failures),
                         **{key: statistics.median(t[key] for t in runs) for key in
                            ("requests_per_s", "p50_ms", "p99_ms", "max_ms", "server_cpu_us_per_request")},
                         "per_trial": [{k: t[k] for k in ("requests_per_s", "p50_ms", "p99_ms", "failed")}
                                       for t in runs]})
    slowloris = []
    with tempfile.TemporaryDirectory(prefix="unirl-bench-server-") as tmp:
        spec = str(SPEC.write(Path(tmp) / "reward_spec.json"))
        env = {"PYTHONPATH": str(REPO), "UNIRL_REWARD_SPEC": spec}
        for name, command, _ in servers:
            command = [spec if part.endswith("reward_spec.json") else part for part in command]
            for slow in [int(n) for n in ns.slowloris.split(",") if n]:
                proc, address = start(command, env)
                try:
                    latency, counts = asyncio.run(_with_slow_clients(address, slow, functools.partial(
                        _legitimate_latency, address, bodies[0])))
                finally:
                    stop(proc)
                slowloris.append({"server": name, "slow_clients": slow, **latency, "slow": counts})
                print(f"{name:<32} {slow:>5} slow clients: a legitimate request p50 {latency['p50_ms']} ms, max "
                      f"{latency['max_ms']} ms, failed {latency['failed']} {latency['failures'] or ''}", flush=True)
    shutil.rmtree(keep, ignore_errors=True)
    print("\nmedians over the trials (failed: all trials together)")
    for row in rows:
        print(_line(row["server"], row["connections"] == "keep-alive", row))
    save("reward_server", {"spec": "math_answer (built-in, trusted: scored in the server's thread)",
                           "request": "OpenRLHF 0.11.2's: one sample, Content-Type application/json",
                           "bounds": {"requests_per_trial": ns.requests, "seconds_per_trial": ns.seconds,
                                      "trials_per_row": ns.repeats,
                                      "warmup": WARMUP, "request_timeout_s": REQUEST_TIMEOUT_S},
                           "slow_clients_beside_the_load": ns.slow_clients, "rows": rows,
                           "legitimate_request_under_slowloris": slowloris})
    return 1 if any(r["failed"] for r in rows if not r["server"].startswith("before")) else 0


if __name__ == "__main__":
    sys.exit(main())
