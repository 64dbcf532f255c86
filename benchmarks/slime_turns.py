"""Turns a second through slime's/vime's environment client (unirl/adapters/slime_environment.py) against a loopback
engine that answers each /generate after 50 ms (an aiohttp server in its own process, like an SGLang router): the
thread-per-request client it had (urllib in asyncio.to_thread, capped by the default executor) against the pooled
asyncio client it has now (aiohttp; httpx's pool measured 27-33 turns/s here), at 256 and 1,024 turns in flight,
alternating, 3 repeats.

Usage: python benchmarks/slime_turns.py [REPEATS]   (results/slime_turns.json with the machine record)
"""

from __future__ import annotations

import asyncio
import multiprocessing
import socket
import sys
import time
from typing import Any

from _common import machine, save, summary

LATENCY_S = 0.05


def serve(port: int) -> None:
    from aiohttp import web

    async def generate(request: Any) -> Any:
        body = await request.json()
        await asyncio.sleep(LATENCY_S)
        n = int(body["sampling_params"]["max_new_tokens"])
        return web.json_response({"meta_info": {"output_token_logprobs": [[-0.5, 5, None]] * n,
                                                "finish_reason": {"type": "length"}}})

    app = web.Application()
    app.router.add_post("/generate", generate)
    web.run_app(app, host="127.0.0.1", port=port, print=None, backlog=4096)


async def turns(client: str, port: int, n: int) -> float:
    from unirl.adapters import slime_environment as env

    url = f"http://127.0.0.1:{port}/generate"
    payload = {"input_ids": [1, 2, 3], "sampling_params": {"max_new_tokens": 2}, "return_logprob": True}

    async def one() -> None:
        if client == "thread":
            answer = await asyncio.to_thread(env._post_blocking, url, payload)
        else:
            answer = await env._post(url, payload)
        assert len(answer["meta_info"]["output_token_logprobs"]) == 2

    start = time.perf_counter()
    await asyncio.gather(*(one() for _ in range(n)))
    rate = n / (time.perf_counter() - start)
    await env.close_client()
    return rate


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 3
    started = machine()
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    server = multiprocessing.get_context("spawn").Process(target=serve, args=(port,), daemon=True)
    server.start()
    try:
        for _ in range(100):
            try:
                socket.create_connection(("127.0.0.1", port), timeout=0.2).close()
                break
            except OSError:
                time.sleep(0.1)
        results: dict[str, dict[str, list[float]]] = {}
        for n in (256, 1024):
            for _ in range(repeats):
                for client in ("thread", "pooled"):
                    rate = asyncio.run(turns(client, port, n))
                    results.setdefault(str(n), {}).setdefault(client, []).append(rate)
                    print(f"{n} in flight, {client}: {rate:.0f} turns/s")
    finally:
        server.terminate()
        server.join(5)
    save("slime_turns", {"machine": started, "engine_latency_s": LATENCY_S, "turns_per_s": results,
                         "summary": {n: {c: summary(v) for c, v in by.items()} for n, by in results.items()}})


if __name__ == "__main__":
    main()
