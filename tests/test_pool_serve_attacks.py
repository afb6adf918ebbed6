"""``python -m agentrl.pool.serve`` against clients that try to stall, fill or reach it from a
web page: each case runs against one real server on loopback (2 worker shards) while a canary
session plays an expert episode, which must stay identical to a local env's."""

from __future__ import annotations

import contextlib
import re
import signal
import socket
import threading
import time
from pathlib import Path

import httpx
import pytest
import uvicorn
from http_envs import ROOT, Server

from agentrl import envs
from agentrl.pool import EnvSpec
from agentrl.pool.http import serve_command, server_problem, servers_problems
from agentrl.pool.serve import EnvService, create_app

SOKO = {"dim_room": 5, "max_steps": 10}
ARGS = ["--kwargs", "dim_room=5", "max_steps=10"]


@pytest.fixture(scope="module")
def server():
    s = Server("FragileSokoban-v0", *ARGS, "--workers", "2", "--max-sessions", "8",
               "--session-ttl", "3")  # fmt: skip
    yield s
    s.stop()


def _open(client: httpx.Client, n: int) -> list[str]:
    r = client.post("/v1/sessions", json={"env": "FragileSokoban-v0", "kwargs": SOKO, "count": n})
    assert r.status_code == 200, r.text
    return r.json()["sessions"]


class Canary:
    """One session playing seed 2's expert episode step by step next to a local env."""

    def __init__(self, url: str):
        self.client = httpx.Client(base_url=url, timeout=30)
        (self.sid,) = _open(self.client, 1)  # slot 0: worker shard 0
        self.local = envs.make("Sokoban-v0", **SOKO)
        self.slowest = 0.0
        want = self.local.reset(seed=2)[0]
        got = self._post("reset", {"session": self.sid, "seed": 2, "options": None})
        assert got["observation"] == want
        self.slowest = 0.0  # the steps' latency (a worker's first call also builds its envs)

    def _post(self, op: str, item: dict) -> dict:
        t0 = time.monotonic()
        r = self.client.post(f"/v1/{op}", json={"items": [item]})
        self.slowest = max(self.slowest, time.monotonic() - t0)
        assert r.status_code == 200, r.text
        return r.json()["results"][0]

    def play(self) -> None:
        """The rest of the episode; every step equal to the local env's."""
        while True:
            action = self.local.expert_action()
            out = self._post("step", {"session": self.sid, "action": action})
            obs, reward, term, trunc, _ = self.local.step(action)
            assert (out["observation"], out["reward"], out["terminated"]) == (obs, reward, term)
            if term or trunc:
                assert term
                return


def test_a_slow_request_holds_only_its_own_worker(server):
    """Another client's 4 slow steps (4.8 s) on worker 1 while the canary, on worker 0, plays."""
    with httpx.Client(base_url=server.url, timeout=60) as client:
        canary = Canary(server.url)
        sids = _open(client, 8 - 1)[:7]
        slot1 = [sids[k] for k in (0, 2, 4, 6)]  # slots 1, 3, 5, 7: worker shard 1
        client.post("/v1/reset", json={"items": [{"session": s, "seed": 1} for s in slot1]})
        slow = threading.Thread(
            target=client.post,
            args=("/v1/step",),
            kwargs={"json": {"items": [{"session": s, "action": "nap"} for s in slot1]}},
        )
        slow.start()
        time.sleep(0.3)
        canary.play()
        assert slow.is_alive()  # the canary finished while the slow request still ran
        slow.join(30)
        client.post("/v1/close", json={"sessions": sids + [canary.sid]})
        assert canary.slowest < 1.0, canary.slowest


def test_client_written_tasks_and_huge_listings_are_refused(server):
    canary = Canary(server.url)
    room = "#" * 9 + "\n#P" + "_X" * 3 + "#\n" + "#O" * 4 + "#\n" + "#" * 9
    bad = [
        ("reset", {"session": canary.sid, "options": {"room": room}}, 403, "not allowed"),
        ("reset", {"session": canary.sid, "options": {"task_id": {"$float": "x"}}}, 400, "$float"),
        ("call", {"session": canary.sid, "method": "task_ids", "args": ["test", 5_000_000]}, 400,
         "limit"),
        ("call", {"session": canary.sid, "method": "task_ids", "args": ["test", "all"]}, 400,
         "limit"),
    ]  # fmt: skip
    for op, item, status, words in bad:
        t0 = time.monotonic()
        r = canary.client.post(f"/v1/{op}", json={"items": [item]})
        assert r.status_code == status and words in r.json()["error"], r.text
        assert time.monotonic() - t0 < 1.0
    ok = canary.client.post("/v1/call", json={"items": [{"session": canary.sid,
                            "method": "task_ids", "args": ["test", 1000]}]})  # fmt: skip
    assert len(ok.json()["results"][0]["result"]) == 1000
    canary.play()
    canary.client.post("/v1/close", json={"sessions": [canary.sid]})


def test_web_pages_and_foreign_host_names_are_refused(server):
    canary = Canary(server.url)
    health = server.url + "/v1/health"
    assert httpx.get(health).status_code == 200
    assert httpx.get(health, headers={"host": f"localhost:{server.port}"}).status_code == 200
    rebinding = httpx.get(health, headers={"host": "attacker.example"})  # DNS rebinding
    assert rebinding.status_code == 403 and "--allow-host" in rebinding.json()["error"]
    page = httpx.post(  # a cross-origin "simple" request: no CORS preflight protects it
        server.url + "/v1/sessions",
        content=b'{"env": "FragileSokoban-v0", "kwargs": {}, "count": 8}',
        headers={"content-type": "text/plain", "origin": "http://attacker.example"},
    )
    assert page.status_code == 403 and "web pages" in page.json()["error"]
    canary.play()
    assert httpx.get(health).json()["open_sessions"] == 1  # nothing was opened by the page
    canary.client.post("/v1/close", json={"sessions": [canary.sid]})


def test_a_huge_body_is_refused_before_it_is_read(server):
    canary = Canary(server.url)
    with socket.create_connection(("127.0.0.1", server.port), timeout=10) as sock:
        sock.sendall(
            b"POST /v1/step HTTP/1.1\r\nHost: 127.0.0.1\r\nContent-Type: application/json\r\n"
            b"Content-Length: 104857600\r\n\r\n{"  # 100 MiB announced, 1 byte sent
        )
        reply = sock.recv(4096).decode()
    assert reply.startswith("HTTP/1.1 413") and "over the 8388608-byte limit" in reply
    canary.play()
    canary.client.post("/v1/close", json={"sessions": [canary.sid]})


def test_idle_sessions_expire_for_the_next_client(server):
    canary = Canary(server.url)
    with httpx.Client(base_url=server.url, timeout=30) as client:
        _open(client, 7)  # never used, never closed: a client that went away
        full = client.post(
            "/v1/sessions", json={"env": "FragileSokoban-v0", "kwargs": SOKO, "count": 1}
        )
        assert full.status_code == 503
        time.sleep(1.6)
        canary._post("step", {"session": canary.sid, "action": "junk"})  # the canary is active
        canary.local.step("junk")
        time.sleep(1.6)  # the 7 are now idle past --session-ttl 3
        assert client.get("/v1/health").json()["free_sessions"] == 7
        assert len(_open(client, 7)) == 7  # reclaimed; the canary's session is not
    canary.play()


def test_a_500_is_one_line_without_paths_and_keeps_the_connection(capsys):
    """A bug in a handler (injected: health() raising with a file path). ``capsys``, not
    ``capfd``: what this process prints, not what other tests' leftover processes write to fd 2."""

    class Broken(EnvService):
        def health(self):
            raise OSError("/srv/secret/state.db: disk I/O error")

    service = Broken("Sokoban-v0", SOKO, max_sessions=1, workers=0)
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(16)
    srv = uvicorn.Server(uvicorn.Config(create_app(service), log_level="warning"))
    thread = threading.Thread(target=srv.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        while not srv.started:
            time.sleep(0.01)
        url = f"http://127.0.0.1:{sock.getsockname()[1]}"
        with httpx.Client(base_url=url) as client:
            first = client.get("/v1/health")
            second = client.post("/v1/close", json={"sessions": []})  # same connection
            assert first.status_code == 500 and "/srv" not in first.text
            assert first.json() == {"error": "internal server error (OSError); see the server log"}
            assert second.status_code == 200
            assert first.extensions["network_stream"] is second.extensions["network_stream"]
    finally:
        srv.should_exit = True
        thread.join(10)
        service.close()
    assert not thread.is_alive()
    err = capsys.readouterr().err
    assert "Traceback" not in err and len(err.strip().splitlines()) == 1, err


def test_sigterm_does_not_wait_for_an_env_call_in_flight():
    s = Server("FragileSokoban-v0", "--workers", "1")
    pid = s.proc.pid
    try:
        with httpx.Client(base_url=s.url, timeout=60) as client:
            (sid,) = client.post("/v1/sessions", json={"env": "FragileSokoban-v0", "kwargs": {},
                                 "count": 1}).json()["sessions"]  # fmt: skip
            client.post("/v1/reset", json={"items": [{"session": sid, "seed": 0}]})
            threading.Thread(
                target=lambda: _quietly(client.post, "/v1/step",
                                        json={"items": [{"session": sid, "action": "sleep"}]}),
                daemon=True,
            ).start()  # fmt: skip
            time.sleep(0.5)  # a 30 s env call in flight
            t0 = time.monotonic()
            s.proc.send_signal(signal.SIGTERM)
            code = s.proc.wait(15)
            took = time.monotonic() - t0
    finally:
        s.stop()
    assert took < 5 and code == 128 + signal.SIGTERM, (took, code)
    assert "Traceback" not in s.proc.stderr.read()
    assert not Path(f"/proc/{pid}").exists()


def _quietly(fn, *args, **kwargs):
    with contextlib.suppress(httpx.HTTPError):
        fn(*args, **kwargs)


def test_the_readme_recipe_serves_what_the_default_run_needs():
    """Every Sokoban serve line the README and the docs give, run as written (on a free port):
    the client's start-up check finds the default run's env, kwargs and 128 sessions there."""
    from train.helpers import make_cfg

    from agentrl.config import load_config

    cfg = load_config(make_cfg())
    spec = EnvSpec(cfg.env.id, dict(cfg.env.kwargs))
    need = cfg.rollout.tasks_per_iter * cfg.rollout.group_size
    pattern = r"python -m agentrl\.pool\.serve (Sokoban-v0(?:[^\n#`\\]|\\\n)*)"
    docs = [ROOT / "README.md", *sorted((ROOT / "docs").rglob("*.md"))]
    lines = [(d, m.group(1)) for d in docs for m in re.finditer(pattern, d.read_text())]
    assert any(d.name == "serving.md" for d, _ in lines), "docs/envs/serving.md lost its line"
    for doc, line in lines:
        args = line.replace("\\\n", " ").split()
        k = args.index("--port")
        del args[k : k + 2]
        s = Server(*args)
        try:
            assert servers_problems([s.url], spec, need) == [], doc
        finally:
            s.stop()


def test_a_mismatched_server_is_refused_in_one_line_naming_what_to_start(server):
    spec = EnvSpec("FragileSokoban-v0", {"dim_room": 6, "max_steps": 10})
    health = httpx.get(server.url + "/v1/health").json()
    problem = server_problem(health, server.url, spec, 4)
    assert problem.count("\n") == 0 and "serves FragileSokoban-v0 with kwargs" in problem
    assert problem.endswith(serve_command(spec, 4, server.url))
    assert serve_command(spec, 4, server.url) == (
        "python -m agentrl.pool.serve FragileSokoban-v0 --kwargs dim_room=6 max_steps=10 "
        f"--max-sessions 4 --port {server.port}"
    )
    (problem,) = servers_problems([server.url], EnvSpec("FragileSokoban-v0", SOKO), 100)
    assert "free sessions of 8, this run needs 100" in problem
