"""The hardened OpenRLHF reward server: what a user and OpenRLHF see (attacks are in tests/adversarial/).

Real server on a loopback socket with ephemeral ports, real reward specs (built-in rewards), real clients
(``http.client``, a raw socket, the ``python -m`` entry point, OpenRLHF 0.11.2's own client in its venv).
"""

from __future__ import annotations

import http.client
import json
import os
import select
import socket
import subprocess
import sys
import time
from collections.abc import Iterator, Mapping
from pathlib import Path
from typing import Any

import pytest

from tests.adversarial.reward_server import (
    GOOD,
    PROMPT,
    SECRET,
    Connection,
    assert_serves,
    close_server,
    exchange,
    expected_total,
    request,
    reward_spec,
    running,
    scored_calls,
)
from tests.support.helpers import REPO, run_harness
from tests.support.parity import PARITY_SAMPLES, expected_rows, parity_spec, same, write_samples
from unirl.adapters import common
from unirl.adapters import openrlhf_server as server_module
from unirl.adapters.openrlhf import ABORT_EXIT_CODE
from unirl.adapters.openrlhf_requests import RequestError, parse_batch
from unirl.adapters.openrlhf_server import Limits, RewardServer, load_secret, serve
from unirl.rewards.spec import RewardPolicy

FAILING = {"query": ["Spell it: seven</s>"], "prompts": ["Spell it: "], "labels": ["seven"]}  # numeric_closeness raises


@pytest.fixture
def parity_server(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> Iterator[RewardServer]:
    """The parity spec (worker processes, a counted failure) behind the default-limits server."""
    monkeypatch.setenv(common.SPEC_ENV, str(parity_spec().write(tmp_path / "reward_spec.json")))
    server = serve("127.0.0.1", 0)
    yield server
    close_server(server)
    for runtime in common._RUNTIMES.values():
        runtime.executor.close()
    common._RUNTIMES.clear()


def connect(server: RewardServer) -> http.client.HTTPConnection:
    host, port = server.server_address[:2]
    return http.client.HTTPConnection(host, port, timeout=30)


def post(server: RewardServer, body: Mapping[str, Any], conn: http.client.HTTPConnection | None = None,
         path: str = "/get_reward", headers: dict[str, str] | None = None) -> tuple[int, dict[str, Any]]:
    own = conn is None
    conn = conn or connect(server)
    try:
        conn.request("POST", path, json.dumps(body), {"Content-Type": "application/json", **(headers or {})})
        response = conn.getresponse()
        return response.status, json.loads(response.read())
    finally:
        if own:
            conn.close()


def wait_until_refused(server: RewardServer, timeout_s: float = 10.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            socket.create_connection(server.server_address[:2], timeout=1).close()
        except ConnectionRefusedError:
            return True
        time.sleep(0.05)
    return False


def test_a_batch_scores_like_the_executor_in_order(parity_server: RewardServer) -> None:
    body = {"query": [s.prompt + s.completion + "</s>" for s in PARITY_SAMPLES],
            "prompts": [s.prompt for s in PARITY_SAMPLES], "labels": [s.reference for s in PARITY_SAMPLES]}
    status, answer = post(parity_server, body)
    assert status == 200
    rows = [{"score": answer["rewards"][i], **{k: v[i] for k, v in answer["extra_logs"].items()}}
            for i in range(len(PARITY_SAMPLES))]
    for i, (row, want) in enumerate(zip(rows, expected_rows(parity_spec()), strict=True)):
        assert same(row, want), f"sample {i}: {row} != {want}"


def test_keep_alive_serves_many_requests_on_one_connection(tmp_path: Path) -> None:
    with running(tmp_path) as server:
        conn = connect(server)
        try:
            answers = [post(server, GOOD, conn) for _ in range(20)]
            first_socket = conn.sock
            post(server, GOOD, conn)
            assert conn.sock is first_socket  # http.client reconnects silently when the server closed it
        finally:
            conn.close()
        assert all(status == 200 and answer["rewards"] == [expected_total()] for status, answer in answers)
        assert server.peak_connections == 1


def test_a_numeric_label_is_a_reference_as_before(tmp_path: Path) -> None:
    # OpenRLHF sends the dataset's label column as it is; an integer answer column must keep scoring.
    with running(tmp_path) as server:
        status, answer = post(server, {**GOOD, "labels": [7]})
        assert status == 200 and answer["rewards"] == [expected_total()]
        status, answer = post(server, {"query": GOOD["query"]})  # no prompts, no labels: still well-formed
        # ... and scored: both rewards need a reference, so both calls fail and the policy's fallback (0) is the total
        assert status == 200 and answer["rewards"] == [0.0] and answer["extra_logs"]["unirl/reward_errors"] == [2.0]


def test_expect_100_continue_gets_continue_then_the_scores(tmp_path: Path) -> None:
    with running(tmp_path) as server:
        data = request(GOOD, headers=("Expect: 100-continue",))
        head, body = data.split(b"\r\n\r\n", 1)
        conn = Connection(server)
        try:
            conn.send(head + b"\r\n\r\n")
            interim = conn.sock.recv(1024)
            conn.send(body)
            reply = conn.reply()
        finally:
            conn.close()
        assert interim.startswith(b"HTTP/1.1 100")
        assert reply.status == 200 and reply.json()["rewards"] == [expected_total()]


def test_secret_in_the_path_or_as_a_bearer_token(tmp_path: Path) -> None:
    with running(tmp_path, secret=SECRET) as server:
        assert post(server, GOOD, path=f"/{SECRET}/get_reward")[0] == 200
        status, answer = post(server, GOOD, headers={"Authorization": f"Bearer {SECRET}"})
        assert status == 200 and answer["rewards"] == [expected_total()]
        status, answer = post(server, GOOD)
        assert status == 401 and "secret" in str(answer["error"])
        assert scored_calls(server) == 4  # two samples scored, two rewards each; the refused one never was


def test_secret_comes_from_the_environment_or_a_file(tmp_path: Path) -> None:
    assert load_secret({}) is None
    assert load_secret({server_module.SECRET_ENV: f" {SECRET}\n"}) == SECRET
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET + "\n")
    assert load_secret({server_module.SECRET_FILE_ENV: str(secret_file)}) == SECRET
    assert load_secret({}, secret_file=str(secret_file)) == SECRET
    with pytest.raises(ValueError, match="16-256 characters"):
        load_secret({server_module.SECRET_ENV: "short"})
    with pytest.raises(ValueError, match="16-256 characters"):
        load_secret({server_module.SECRET_ENV: "has a space and is long enough"})
    with pytest.raises(ValueError, match="16-256"):
        RewardServer("127.0.0.1", 0, secret="x")


def test_limits_are_checked() -> None:
    assert Limits().problems() == []
    with pytest.raises(ValueError, match="max_connections must be positive"):
        RewardServer("127.0.0.1", 0, Limits(max_connections=0))


def test_connection_cap_stays_under_the_file_descriptor_limit(monkeypatch: pytest.MonkeyPatch) -> None:
    # 1,021 idle connections used to exhaust a 1,024-descriptor process; the cap leaves half for everything else.
    monkeypatch.setattr(server_module.resource, "getrlimit", lambda _: (64, 4096))
    server = RewardServer("127.0.0.1", 0, Limits(max_connections=256))
    try:
        assert server.max_connections == 32
    finally:
        server.server_close()


def test_malformed_requests_never_reach_the_error_rate(tmp_path: Path) -> None:
    """Only well-formed calls count: 30 malformed requests, then the policy trips on the second failing call."""
    policy = RewardPolicy(on_error="fallback", max_error_rate=0.4, min_calls=4, workers=1)
    with running(tmp_path, policy=policy) as server:
        malformed: list[dict[str, Any]] = [{"query": []}, {"query": [1]}, {"labels": ["x"]}]
        for body in malformed * 10:
            assert 400 <= exchange(server, request(body)).status < 500
        assert scored_calls(server) == 0
        status, answer = post(server, FAILING)  # 1 of 2 calls failed, but only 2 calls so far (< min_calls)
        assert status == 200 and answer["extra_logs"]["unirl/reward_errors"] == [1.0]
        status, answer = post(server, FAILING)  # 2 of 4 failed: 50% > 40%
        assert status == 500 and "max_error_rate=0.4" in str(answer["error"]) and answer["stopping"] is True
        assert wait_until_refused(server), "the server kept listening after the policy aborted"


def test_abort_answers_500_then_503_on_open_connections_then_stops(tmp_path: Path) -> None:
    with running(tmp_path, policy=RewardPolicy(on_error="abort", workers=1)) as server:
        kept = connect(server)
        try:
            assert post(server, GOOD, kept)[0] == 200  # a kept-alive connection, open across the abort
            status, answer = post(server, FAILING)
            assert status == 500 and "on_error=abort" in str(answer["error"])
            assert "needs a numeric reference" in str(answer["error"])
            assert server.stopped_because is not None and "on_error=abort" in server.stopped_because
            status, answer = post(server, GOOD, kept)
            assert status == 503 and "stopped the run" in str(answer["error"])
        finally:
            kept.close()
        assert wait_until_refused(server)


def test_a_broken_spec_is_a_500_without_a_shutdown(tmp_path: Path) -> None:
    with running(tmp_path) as server:
        good_spec = os.environ[common.SPEC_ENV]
        os.environ[common.SPEC_ENV] = str(tmp_path / "missing.json")
        try:
            status, answer = post(server, GOOD)
        finally:
            os.environ[common.SPEC_ENV] = good_spec
        assert status == 500 and "scoring failed" in str(answer["error"])
        assert_serves(server)


def test_validation_names_the_field() -> None:
    with pytest.raises(RequestError) as info:
        parse_batch(json.dumps({"query": ["a", "b"], "labels": ["1", {"x": 1}]}).encode(), 10)
    assert (info.value.status, info.value.field) == (422, "labels[1]")
    batch = parse_batch(json.dumps({"query": [PROMPT + "7"], "prompts": [PROMPT], "labels": [""]}).encode(), 10)
    assert batch.labels == [None]  # "" is no reference, as OpenRLHF sends for a dataset without labels
    with pytest.raises(RequestError) as info:
        parse_batch(json.dumps({"query": ["a"] * 11}).encode(), 10)
    assert info.value.status == 413


def _start_cli(tmp_path: Path, *args: str, env: dict[str, str] | None = None) -> tuple[subprocess.Popen[str], str]:
    spec = reward_spec(RewardPolicy(on_error="abort", workers=1)).write(tmp_path / "reward_spec.json")
    proc = subprocess.Popen([sys.executable, "-m", "unirl.adapters.openrlhf_server", "--spec", str(spec), "--port", "0",
                             *args], stdout=subprocess.PIPE, stderr=subprocess.PIPE, text=True, cwd=REPO,
                            env={**os.environ, **(env or {})})
    assert proc.stdout is not None
    ready, _, _ = select.select([proc.stdout], [], [], 60)
    line = proc.stdout.readline() if ready else ""
    if "reward server on" not in line:
        proc.kill()
        raise AssertionError(f"the server did not start: {line!r} {proc.communicate(timeout=10)}")
    return proc, line


def test_cli_binds_loopback_hides_the_secret_and_exits_70_after_an_abort(tmp_path: Path) -> None:
    secret_file = tmp_path / "secret"
    secret_file.write_text(SECRET)
    proc, line = _start_cli(tmp_path, "--secret-file", str(secret_file), "--max-connections", "4")
    try:
        assert line.startswith("unirl reward server on http://127.0.0.1:") and SECRET not in line
        port = int(line.split("http://127.0.0.1:")[1].split("/")[0])
        conn = http.client.HTTPConnection("127.0.0.1", port, timeout=30)
        conn.request("POST", f"/{SECRET}/get_reward", json.dumps(FAILING), {"Content-Type": "application/json"})
        response = conn.getresponse()
        assert response.status == 500 and "on_error=abort" in json.loads(response.read())["error"]
        conn.close()
        out, err = proc.communicate(timeout=30)
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
    assert proc.returncode == ABORT_EXIT_CODE, err
    assert "shutting down" in err and SECRET not in out + err


def test_cli_refuses_a_bad_secret_and_has_no_secret_flag(tmp_path: Path) -> None:
    spec = reward_spec().write(tmp_path / "reward_spec.json")
    base = [sys.executable, "-m", "unirl.adapters.openrlhf_server", "--spec", str(spec), "--port", "0"]
    out = subprocess.run(base, capture_output=True, text=True, timeout=60, cwd=REPO,
                         env={**os.environ, server_module.SECRET_ENV: "short"})
    assert out.returncode == 2 and "16-256 characters" in out.stderr
    out = subprocess.run([*base, "--secret", SECRET], capture_output=True, text=True, timeout=60, cwd=REPO)
    assert out.returncode == 2 and "unrecognized arguments: --secret" in out.stderr


# -- through OpenRLHF 0.11.2's own client (its venv) ---------------------------------------------------------------
def _openrlhf_rows(out: Path) -> list[dict[str, Any]]:
    results = json.loads(out.read_text())["results"]
    return [{"score": r["reward"], **r["extra_logs"]} if r["reward"] is not None else {"log": r["log"]}
            for r in results]


@pytest.mark.openrlhf
@pytest.mark.slow
def test_openrlhf_client_gets_the_right_scores_through_the_secret_path(tmp_path: Path) -> None:
    """OpenRLHF's SingleTurnAgentExecutor POSTs (aiohttp, a new connection per request, 8 at once) to the URL with
    the secret segment, as ``--reward.remote_url`` would carry it, and its Experience holds the executor's scores."""
    spec_path = parity_spec().write(tmp_path / "reward_spec.json")
    with pytest.MonkeyPatch.context() as mp:
        mp.setenv(common.SPEC_ENV, str(spec_path))
        server = serve("127.0.0.1", 0, secret=SECRET, limits=Limits(max_connections=4))  # 8 clients, 4 slots
        try:
            host, port = server.server_address[:2]
            out = tmp_path / "out.json"
            result = run_harness("openrlhf", "--remote-url", f"http://{host}:{port}/{SECRET}/get_reward",
                                 "--samples", str(write_samples(tmp_path / "samples.jsonl")), "--out", str(out),
                                 "--concurrency", "8")
            assert result.returncode == 0, result.stderr[-3000:]
            rows = _openrlhf_rows(out)
            one = tmp_path / "one.jsonl"
            one.write_text(json.dumps(PARITY_SAMPLES[0].to_dict()) + "\n")
            wrong = run_harness("openrlhf", "--remote-url", f"http://{host}:{port}/get_reward", "--samples", str(one),
                                "--out", str(tmp_path / "wrong.json"))
            assert wrong.returncode == 0, wrong.stderr[-3000:]
            refused = _openrlhf_rows(tmp_path / "wrong.json")
            counts = dict(server.counts)
        finally:
            close_server(server)
            for runtime in common._RUNTIMES.values():
                runtime.executor.close()
            common._RUNTIMES.clear()
    for i, (row, want) in enumerate(zip(rows, expected_rows(parity_spec()), strict=True)):
        assert same(row, want, rel=1e-6), f"sample {i}: {row} != {want}"  # float32 tensors in OpenRLHF
    # Without the secret OpenRLHF gets 401s (it retries 5 times) and records no reward: never a made-up one.
    assert "score" not in refused[0] and "401" in " ".join(refused[0]["log"])
    assert counts.get(401) == 5 and counts.get(200) == len(PARITY_SAMPLES), counts



def test_the_server_reads_the_run_s_rows_where_a_launch_exports_them() -> None:
    from unirl.adapters.openrlhf_requests import RUN_DATA_FILES
    from unirl.backend.export import export_path
    from unirl.backend.plan import in_run_dir

    for split, name in RUN_DATA_FILES.items():
        assert export_path(split, "openrlhf_jsonl") == in_run_dir(name)
