"""The gateway's overhead per call, and its calls/s with concurrent sessions, on the tiny model.

    python scripts/bench_gateway.py                      # both parts below
    python scripts/bench_gateway.py --only overhead --calls 200
    python scripts/bench_gateway.py --only work --calls 400
    python scripts/bench_gateway.py --only concurrency --sessions 1 16 64
    python scripts/bench_gateway.py --only stream --calls 50 --stream-tokens 64

- overhead: the same request, alternated: a direct ``HFBackend.generate`` of the prompt ids
  (the engine alone) against a ``/v1/chat/completions`` POST to the gateway on loopback (one
  keep-alive HTTP client; the gateway renders the chat template, queues the request to its
  engine thread, decodes and reads the reply, records the call). Greedy, a fixed response length
  (``--tokens``), so both sample the same tokens. Median and p99 of the per-call difference, and
  the ratio of the medians.
- the gateway alone: the same POSTs with a backend that samples nothing (it returns four fixed
  tokens at once): the HTTP round trip and the gateway's own work, client included, without the
  thread hand-offs competing with a running engine.
- an engine that sleeps: the same POSTs with a backend that sleeps ``--sleep-ms`` (about the
  tiny model's call) and then answers at once, against the same sleep called directly: the
  hand-offs and the HTTP round trip after an idle wait, without an engine's compute.
- work: the gateway's own work per call in process (``Gateway.complete``: the request's checks,
  the prompt, the engine queue and thread, the reply, the record), no HTTP, with that engine,
  on growing 4-call dialogues; and the chat-template rendering it memoises, afresh against
  memoised (the ratio in one process).
- concurrency: N sessions, each a thread with its own HTTP client making ``--per-session`` calls
  of a growing dialogue, spread over ``--procs`` client processes (so the clients do not share
  the server's interpreter); calls/s over the whole run, against the engine's own calls/s when it is
  given the same prompts N at a time (batched: what the gateway's engine thread can do at best).
- stream: a streamed reply with no tools (``stream=True``, sampled with a fixed seed, up to
  ``--stream-tokens`` tokens) on one keep-alive client: the time to its first content piece and
  to its last event, alternated with the same request not streamed (the whole reply); medians,
  and the first piece's and the last event's times as fractions of the whole reply's.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import socket
import statistics
import subprocess
import sys
import threading
import time
from collections.abc import Callable
from http.client import HTTPConnection
from urllib.parse import urlsplit

import httpx
import numpy as np
import torch
import uvicorn
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from agentrl.backends.base import Generation, SamplingParams
from agentrl.backends.hf import HFBackend
from agentrl.gateway import Gateway
from agentrl.gateway.chat import parse_request
from agentrl.models import load_model

MSGS = [
    {"role": "system", "content": "Answer the question. Use the tools."},
    {"role": "user", "content": "Where does A live?"},
]


def _alternated(fns: list[Callable[[], object]], calls: int, warmup: int = 5) -> list[list[float]]:
    """Seconds of each of ``fns``, called in turn ``calls`` times after ``warmup`` rounds left
    out (each round's calls under the same load)."""
    out: list[list[float]] = [[] for _ in fns]
    for i in range(calls + warmup):
        for f, ts in zip(fns, out):
            t0 = time.perf_counter()
            f()
            if i >= warmup:
                ts.append(time.perf_counter() - t0)
    return out


class Plain:
    """A keep-alive client on the standard library's ``http.client``: the lightest client, so
    the figure measured with it is the gateway's and the loopback's share of a call, apart
    from an HTTP library's own work (httpx, which the ``openai`` SDK uses)."""

    def __init__(self, base_url: str, key: str):
        url = urlsplit(base_url)
        self.conn = HTTPConnection(url.hostname, url.port, timeout=60)
        self.path = url.path.rstrip("/") + "/chat/completions"
        self.headers = {"Authorization": f"Bearer {key}", "Content-Type": "application/json"}

    def post(self, body: dict) -> dict:
        self.conn.request("POST", self.path, json.dumps(body), self.headers)
        r = self.conn.getresponse()
        data = r.read()
        if r.status != 200:
            raise RuntimeError(f"HTTP {r.status}: {data[:200]!r}")
        return json.loads(data)

    def close(self) -> None:
        self.conn.close()


class _Clients:
    """Two clients of one server: httpx (what the ``openai`` SDK uses) and :class:`Plain`."""

    def __init__(self, base_url: str, key: str):
        self._httpx = httpx.Client(base_url=base_url, headers={"Authorization": f"Bearer {key}"})
        self._plain = Plain(base_url, key + "-plain")

    def httpx(self, body: dict) -> dict:
        r = self._httpx.post("/chat/completions", json=body)
        r.raise_for_status()
        return r.json()

    def plain(self, body: dict) -> dict:
        return self._plain.post(body)

    def __enter__(self) -> _Clients:
        return self

    def __exit__(self, *exc) -> None:
        self._httpx.close()
        self._plain.close()


def overhead(gw: Gateway, backend: HFBackend, tok, calls: int, tokens: int) -> None:
    prompt = gw.renderer.full(_messages(), ())
    sampling = SamplingParams(max_new_tokens=tokens, temperature=0.0, seed=0)
    body = {"model": "x", "messages": MSGS, "temperature": 0, "max_tokens": tokens}
    sampled: list[int] = []

    def engine() -> None:
        sampled.append(len(backend.generate([prompt], sampling)[0].token_ids))

    with _Clients(gw.base_url, "bench") as c:

        def post() -> None:
            assert c.httpx(body)["usage"]["completion_tokens"] == sampled[-1]

        def post_plain() -> None:
            assert c.plain(body)["usage"]["completion_tokens"] == sampled[-1]

        # each client's call follows an engine call, so both meet threads that waited as long
        direct, through, direct2, light = _alternated([engine, post, engine, post_plain], calls)
    diff, diff_plain = np.array(through) - np.array(direct), np.array(light) - np.array(direct2)
    md, mg = statistics.median(direct), statistics.median(through)
    print(f"overhead ({calls} calls, {tokens} tokens, greedy): direct engine median "
          f"{md * 1e3:.2f} ms, through the gateway {mg * 1e3:.2f} ms; added per call: median "
          f"{np.median(diff) * 1e3:.2f} ms, p99 {np.percentile(diff, 99) * 1e3:.2f} ms; "
          f"ratio {mg / md:.2f}x")  # fmt: skip
    print(f"  the same calls with the standard library's http.client (no HTTP library's work): "
          f"added per call median {np.median(diff_plain) * 1e3:.2f} ms, p99 "
          f"{np.percentile(diff_plain, 99) * 1e3:.2f} ms")  # fmt: skip


def stream(gw: Gateway, calls: int, tokens: int) -> None:
    base = {"model": "x", "messages": MSGS, "temperature": 1.0, "seed": 3, "max_tokens": tokens}
    first, last, plain, pieces, sizes = [], [], [], [], []
    with httpx.Client(base_url=gw.base_url, timeout=60) as http:
        for i in range(calls + 3):
            head = {"Authorization": f"Bearer stream-{i}"}  # a session a call: no prefix reuse
            t0 = time.perf_counter()
            r = http.post("/chat/completions", json=base, headers={"X-Session-Id": f"p-{i}"})
            t1 = time.perf_counter()
            r.raise_for_status()
            n, t_first = 0, None
            with http.stream("POST", "/chat/completions", json={**base, "stream": True},
                             headers=head) as s:  # fmt: skip
                for line in s.iter_lines():
                    event = json.loads(line[6:]) if line.startswith("data: {") else {}
                    if any(c["delta"].get("content") for c in event.get("choices", ())):
                        t_first = t_first or time.perf_counter()
                        n += 1
            t2 = time.perf_counter()
            if i >= 3 and t_first is not None:
                plain.append(t1 - t0)
                first.append(t_first - t1)
                last.append(t2 - t1)
                pieces.append(n)
                sizes.append(r.json()["usage"]["completion_tokens"])
    mp, mf, ml = (statistics.median(x) for x in (plain, first, last))
    print(f"stream ({len(first)} calls with content, {statistics.median(sizes):.0f} tokens a reply "
          f"(median), {statistics.median(pieces):.0f} pieces): the whole reply not streamed "
          f"{mp * 1e3:.1f} ms; streamed: first piece {mf * 1e3:.1f} ms, last event "
          f"{ml * 1e3:.1f} ms; first piece / whole reply {mf / mp:.2f}, last event / whole "
          f"reply {ml / mp:.2f}")  # fmt: skip


class Instant:
    """A backend that answers at once with four fixed tokens (the gateway's own cost alone)."""

    def __init__(self, stop: int):
        self.stop = stop

    def generate(self, prompts, sampling, allowed=None):
        return [Generation([40, 41, 42, self.stop], [-1.0] * 4) for _ in prompts]

    def update_weights(self, state_dict) -> None:
        pass

    def close(self) -> None:
        pass


class Sleeper(Instant):
    """Answers like :class:`Instant` after sleeping ``seconds`` (an engine that takes the time
    of a real call without using a core: the wait before each hand-off, without the compute)."""

    def __init__(self, stop: int, seconds: float):
        super().__init__(stop)
        self.seconds = seconds

    def generate(self, prompts, sampling, allowed=None):
        time.sleep(self.seconds)
        return super().generate(prompts, sampling, allowed)


def idle(tok, calls: int, seconds: float) -> None:
    """The same POSTs with :class:`Sleeper` against the same sleep called directly: what a call
    adds once the threads have waited ``seconds`` (the hand-offs woken after an idle wait)."""
    body = {"model": "x", "messages": MSGS, "temperature": 0}
    with Gateway(Sleeper(tok.eos_token_id, seconds), tok) as gw:
        gw.start()
        with _Clients(gw.base_url, "s") as c:

            def nap() -> None:
                time.sleep(seconds)

            direct, through, direct2, light = _alternated(
                [nap, lambda: c.httpx(body), nap, lambda: c.plain(body)], calls
            )
    d, d_plain = np.array(through) - np.array(direct), np.array(light) - np.array(direct2)
    print(f"an engine that sleeps {seconds * 1e3:.0f} ms ({calls} calls): added per call median "
          f"{np.median(d) * 1e3:.2f} ms, p99 {np.percentile(d, 99) * 1e3:.2f} ms; with http.client "
          f"{np.median(d_plain) * 1e3:.2f} ms, p99 {np.percentile(d_plain, 99) * 1e3:.2f} ms")  # fmt: skip


def _round_trips(base_url: str, body: dict, calls: int) -> tuple[list[float], list[float], float]:
    """Round trips with httpx and with http.client, alternated; CPU per pair of calls."""
    with _Clients(base_url, "b") as c:
        pair = [lambda: c.httpx(body), lambda: c.plain(body)]
        _alternated(pair, 10)
        cpu0 = time.process_time()
        ts, tp = _alternated(pair, calls, warmup=0)
        return ts, tp, (time.process_time() - cpu0) / calls


def alone(tok, calls: int) -> None:
    body = {"model": "x", "messages": MSGS, "temperature": 0}
    with Gateway(Instant(tok.eos_token_id), tok) as gw:
        gw.start()
        ts, tp, cpu = _round_trips(gw.base_url, body, calls)
    print(f"the gateway alone (an engine that answers at once; {calls} calls): round trip "
          f"median {np.median(ts) * 1e3:.2f} ms, p99 {np.percentile(ts, 99) * 1e3:.2f} ms; "
          f"with http.client {np.median(tp) * 1e3:.2f} ms, p99 {np.percentile(tp, 99) * 1e3:.2f} "
          f"ms; CPU per pair of calls (clients and gateway, one process) {cpu * 1e3:.2f} ms")  # fmt: skip


def bare(calls: int) -> None:
    """The two clients against a bare Starlette route on uvicorn (it reads the JSON body and
    answers a fixed reply at once): the HTTP round trip with no gateway, each client's share."""
    reply = {"choices": [{"message": {"role": "assistant", "content": "x"}}], "usage": {}}

    async def route(request: Request) -> JSONResponse:
        await request.json()
        return JSONResponse(reply)

    app = Starlette(routes=[Route("/v1/chat/completions", route, methods=["POST"])])
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    config = uvicorn.Config(app, log_level="warning", access_log=False, lifespan="off")
    server = uvicorn.Server(config)
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not server.started:
            if not thread.is_alive():
                raise RuntimeError("the bare route's server could not start")
            time.sleep(0.01)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}/v1"
        ts, tp, cpu = _round_trips(url, {"model": "x", "messages": MSGS}, calls)
    finally:
        server.should_exit = True
        thread.join(timeout=10)
    print(f"a bare Starlette route on uvicorn, no gateway ({calls} calls): round trip median "
          f"{np.median(ts) * 1e3:.2f} ms with httpx, {np.median(tp) * 1e3:.2f} ms with "
          f"http.client; CPU per pair of calls {cpu * 1e3:.2f} ms")  # fmt: skip


def work(tok, calls: int) -> None:
    """The gateway's own work per call in process, without HTTP: ``Gateway.complete`` with an
    engine that answers at once, on a 4-call dialogue that grows (the agent loop's pattern);
    and the prompt rendering it memoises, afresh against memoised, in the same process."""
    gw = Gateway(Instant(tok.eos_token_id), tok)
    tools = [{"type": "function", "function": {"name": "lookup", "parameters": {
        "type": "object", "properties": {"name": {"type": "string"}}, "required": ["name"]}}}]  # fmt: skip
    loop = asyncio.new_event_loop()

    async def episode(k: int) -> None:
        session = gw.sessions.get(f"work-{k}", create=True)
        msgs = list(MSGS)
        for _ in range(4):
            rec = await gw.complete(session, parse_request({"messages": msgs, "tools": tools}))
            msgs += [rec.reply.message(), {"role": "user", "content": "go on"}]

    try:
        loop.run_until_complete(episode(-1))
        t0, c0 = time.perf_counter(), time.process_time()
        for k in range(calls // 4):
            loop.run_until_complete(episode(k))
        wall, cpu = (time.perf_counter() - t0) / calls, (time.process_time() - c0) / calls
        req = parse_request({"messages": MSGS, "tools": tools})
        r = gw.renderer
        n = 500
        t0 = time.perf_counter()
        for _ in range(n):
            r.ids(r._render([m.template(r.syntax) for m in req.messages], req.tools))
        fresh = (time.perf_counter() - t0) / n
        t0 = time.perf_counter()
        for _ in range(n):
            r.full(req.messages, req.tools, req.tools_key)
        memo = (time.perf_counter() - t0) / n
    finally:
        loop.close()
        gw.close()
    print(f"the gateway's own work ({calls} calls in 4-call dialogues, no HTTP, an engine that "
          f"answers at once): {wall * 1e3:.3f} ms a call ({cpu * 1e3:.3f} ms CPU); the prompt "
          f"rendered afresh {fresh * 1e3:.3f} ms, memoised {memo * 1e3:.3f} ms "
          f"({fresh / memo:.0f}x)")  # fmt: skip


def _messages():
    return parse_request({"messages": MSGS}).messages


#: One client process: ``threads`` sessions, ``per`` calls each, started at ``start`` (epoch s);
#: prints the calls made and the time the last one ended. Only httpx is imported (fast start).
CLIENT = """
import json, sys, threading, time
import httpx
url, prefix, threads, per, tokens, start = sys.argv[1], sys.argv[2], *map(float, sys.argv[3:7])
msgs0 = json.loads(sys.argv[7])
done = []
def session(k):
    msgs = list(msgs0)
    with httpx.Client(base_url=url, timeout=600, headers={"Authorization": f"Bearer {prefix}-{k}"}) as h:
        for _ in range(int(per)):
            r = h.post("/chat/completions", json={"model": "x", "messages": msgs, "max_tokens": int(tokens)})
            r.raise_for_status()
            msgs = [*msgs, r.json()["choices"][0]["message"], {"role": "user", "content": "go on"}]
            done.append(1)
time.sleep(max(0.0, start - time.time()))
ts = [threading.Thread(target=session, args=(k,)) for k in range(int(threads))]
[t.start() for t in ts]
[t.join() for t in ts]
print(len(done), time.time())
"""


def concurrency(
    gw: Gateway, backend: HFBackend, sessions: list[int], per: int, tokens: int, procs: int
) -> None:
    """N sessions in ``procs`` client processes (threads inside), all starting at one moment."""
    for n in sessions:
        k = min(n, procs)
        start = time.time() + 5.0  # every client process has imported httpx by then
        clients = [
            subprocess.Popen(
                [sys.executable, "-c", CLIENT, gw.base_url, f"c{n}-{i}",
                 str(n // k + (i < n % k)), str(per), str(tokens), str(start), json.dumps(MSGS)],
                stdout=subprocess.PIPE, text=True,
            )
            for i in range(k)
        ]  # fmt: skip
        calls0 = gw.engine.calls
        outs = [c.communicate(timeout=600)[0].split() for c in clients]
        made, last = sum(int(o[0]) for o in outs), max(float(o[1]) for o in outs)
        rate = made / (last - start)
        # the engine alone: the same number of calls, n prompts per generate call
        prompt = gw.renderer.full(_messages(), ())
        sampling = SamplingParams(max_new_tokens=tokens, temperature=1.0, seed=0)
        t1 = time.perf_counter()
        for _ in range(per):
            backend.generate([prompt] * n, sampling)
        eng = n * per / (time.perf_counter() - t1)
        print(f"{n:3d} sessions x {per} calls ({k} client processes): {rate:7.1f} calls/s through "
              f"the gateway, {made} calls in {gw.engine.calls - calls0} engine calls; the engine "
              f"alone, {n} prompts a call: {eng:7.1f} calls/s; ratio {rate / eng:.2f}")  # fmt: skip


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("--only", choices=["overhead", "work", "concurrency", "stream"], default=None)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--tokens", type=int, default=8)
    ap.add_argument("--stream-tokens", type=int, default=64, help="a streamed reply's cap")
    ap.add_argument("--sessions", type=int, nargs="+", default=[1, 16, 64])
    ap.add_argument("--per-session", type=int, default=4)
    ap.add_argument("--procs", type=int, default=4, help="client processes (sessions split)")
    ap.add_argument("--threads", type=int, default=1, help="torch CPU threads")
    ap.add_argument("--sleep-ms", type=float, default=12.0,
                    help="overhead: the sleeping engine's time a call (about the tiny model's)")  # fmt: skip
    args = ap.parse_args()
    torch.set_num_threads(args.threads)
    model, tok, _ = load_model("tiny")
    model.eval()
    backend = HFBackend(model, tok.pad_token_id)
    cap = max(args.tokens, args.stream_tokens)
    with Gateway(backend, tok, max_tokens=cap) as gw:
        gw.start()
        if args.only in (None, "overhead"):
            overhead(gw, backend, tok, args.calls, args.tokens)
            alone(tok, args.calls)
            idle(tok, args.calls, args.sleep_ms / 1e3)
            bare(args.calls)
        if args.only in (None, "work"):
            work(tok, args.calls)
        if args.only in (None, "concurrency"):
            concurrency(gw, backend, args.sessions, args.per_session, args.tokens, args.procs)
        if args.only in (None, "stream"):
            stream(gw, args.calls if args.only == "stream" else 50, args.stream_tokens)


if __name__ == "__main__":
    main()
