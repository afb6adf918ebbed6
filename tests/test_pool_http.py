"""Envs served over HTTP: ``python -m agentrl.pool.serve`` as a real subprocess on loopback, and
the ``http`` env pool against it (the pool contract: faults cost their own episodes; a server
that dies or hangs ends its episodes and is used again after a restart), the protocol's
validation under fuzzed requests, the bearer token, and the JSON codec."""

from __future__ import annotations

import json
import math
import signal
import subprocess
import sys
import threading
import time

import httpx
import pytest
from http_envs import ROOT, Server
from hypothesis import given
from hypothesis import strategies as st

from agentrl.pool import EnvPool, EnvSpec, make_pool
from agentrl.pool.wire import WireError, from_wire, to_wire

SOKO = {"dim_room": 5, "max_steps": 10}


@pytest.fixture(scope="module")
def soko():
    s = Server("Sokoban-v0", "--kwargs", "dim_room=5", "max_steps=10", "--workers", "2")
    yield s
    s.stop()


@pytest.fixture(scope="module")
def fragile():
    s = Server("FragileSokoban-v0", "--workers", "2", "--step-timeout", "2")
    yield s
    s.stop()


def http_pool(server: Server, n: int, env: str = "Sokoban-v0", kwargs=None, **kw):
    specs = [EnvSpec(env, dict(SOKO if kwargs is None else kwargs))] * n
    return make_pool(specs, backend="http", http_urls=[server.url], step_timeout=2.0, **kw)


def test_same_results_as_the_in_process_pool(soko):
    specs = [EnvSpec("Sokoban-v0", SOKO)] * 4
    actions = [["up", "down", "left", "junk"], ["right"] * 4, ["down", "up", "xx", "left"]]
    traces = []
    for pool in (EnvPool(specs), http_pool(soko, 4)):
        with pool:
            trace = [pool.reset(seeds=[3, 3, 4, 5])]
            trace += [[tuple(r) for r in pool.step(range(4), a)] for a in actions]
            trace.append(pool.call(None, "expert_action"))
            trace.append(pool.call([0], "task_ids", "test", 3))
        traces.append(trace)
    assert traces[0] == traces[1]
    assert isinstance(traces[1][1][0][4]["milestones"], tuple)  # tuples survive the wire


def test_env_faults_cost_their_own_episode_only(fragile):
    """raise, an unpicklable info, a worker's death: the server's pool cuts that env (and, for a
    death, its worker's envs), restarts the worker, and keeps serving."""
    with http_pool(fragile, 4, "FragileSokoban-v0", {}) as pool:
        pool.reset(seeds=[0, 1, 2, 3])
        out = pool.step([0, 1, 2, 3], ["raise", "up", "unpicklable", "down"])
        assert out[0].truncated and "boom" in out[0].info["error"]
        assert "pickled" in out[2].info["error"]
        assert not out[1].truncated and not out[3].truncated
        out = pool.step([1, 3], ["segfault", "up"])  # env 1 and 3 share server worker 1
        assert out[0].truncated and "SIGSEGV" in out[0].info["error"]
        pool.reset(seeds=[0, 1, 2, 3])
        assert all(not r.truncated for r in pool.step(range(4), ["up"] * 4))


def test_a_hanging_env_is_cut_at_the_servers_deadline(fragile):
    with http_pool(fragile, 2, "FragileSokoban-v0", {}) as pool:
        pool.reset(seeds=[0, 1])
        t0 = time.monotonic()
        out = pool.step([0, 1], ["sleep", "up"])
        assert time.monotonic() - t0 < 15
        assert out[0].truncated and "timed out" in out[0].info["error"]


def test_an_unserialisable_info_ends_only_its_own_episode():
    server = Server("SetInfoSokoban-v0", "--workers", "0")
    try:
        pool = http_pool(server, 2, "SetInfoSokoban-v0", {})
        with pool:
            pool.reset(seeds=[0, 1])
            out = pool.step([0, 1], ["set", "up"])
            assert out[0].truncated and "info['tags'] (set) cannot be sent" in out[0].info["error"]
            assert not out[1].truncated
    finally:
        server.stop()


def test_a_dead_server_ends_its_episodes_and_is_used_again_after_a_restart():
    server = Server("Sokoban-v0", "--kwargs", "dim_room=5", "max_steps=10", "--workers", "0")
    pool = http_pool(server, 2)
    try:
        pool.reset(seeds=[1, 2])
        server.stop()
        out = pool.step([0, 1], ["up", "up"])
        assert all(r.truncated and server.url in r.info["error"] for r in out)
        with pytest.raises(RuntimeError, match=server.url.replace(".", r"\.")):
            pool.reset(seeds=[1, 2])
        server = Server(
            "Sokoban-v0", "--kwargs", "dim_room=5", "max_steps=10", "--workers", "0",
            port=server.port,
        )  # fmt: skip
        obs = pool.reset(seeds=[1, 2])  # sessions reopened on the restarted server
        assert len(obs) == 2 and not pool.step([0], ["up"])[0].truncated
    finally:
        pool.close()
        server.stop()


def test_a_hung_server_costs_one_deadline():
    server = Server("Sokoban-v0", "--kwargs", "dim_room=5", "max_steps=10", "--workers", "0")
    pool = http_pool(server, 2)
    try:
        pool.reset(seeds=[1, 2])
        server.proc.send_signal(signal.SIGSTOP)
        t0 = time.monotonic()
        out = pool.step([0, 1], ["up", "up"])
        waited = time.monotonic() - t0
        assert 2.0 <= waited < 2.0 + 10.0 + 5, waited  # step_timeout + the server's grace
        assert all(r.truncated and "did not answer" in r.info["error"] for r in out)
        server.proc.send_signal(signal.SIGCONT)
        assert len(pool.reset(seeds=[1, 2])) == 2
    finally:
        pool.close()
        server.stop()


def test_a_server_serving_another_env_is_refused_at_start(soko):
    with pytest.raises(RuntimeError, match="serves Sokoban-v0 with kwargs"):
        http_pool(soko, 2, kwargs={"dim_room": 6})
    with pytest.raises(RuntimeError, match="cannot be used"):
        make_pool([EnvSpec("Sokoban-v0")], backend="http", http_urls=["http://127.0.0.1:9"])


def test_fuzzed_requests_get_errors_and_the_server_keeps_serving(soko):
    bad = [
        ("/v1/step", b"{not json"),
        ("/v1/step", b"[]"),
        ("/v1/step", json.dumps({"items": [{"session": "nope", "action": "up"}]}).encode()),
        ("/v1/step", json.dumps({"items": [{"session": "x", "action": 5}]}).encode()),
        ("/v1/step", json.dumps({"items": [{"session": "x", "action": "a", "more": 1}]}).encode()),
        ("/v1/reset", json.dumps({"items": [{"session": "x", "seed": -1}]}).encode()),
        ("/v1/reset", json.dumps({"items": [{"session": "x", "seed": 2**70}]}).encode()),
        ("/v1/call", json.dumps({"items": [{"session": "x", "method": "__init__"}]}).encode()),
        ("/v1/sessions", json.dumps({"env": "Sokoban-v0", "kwargs": {}, "count": 1}).encode()),
        (
            "/v1/sessions",
            json.dumps({"env": "Sokoban-v0", "kwargs": SOKO, "count": 10**6}).encode(),
        ),
        ("/v1/step", b"x" * (9 * 2**20)),
        ("/v1/nothing", b"{}"),
    ]
    with httpx.Client(base_url=soko.url, timeout=30) as client:
        for path, body in bad:
            r = client.post(path, content=body, headers={"content-type": "application/json"})
            assert 400 <= r.status_code < 500, (path, body[:60], r.status_code, r.text)
            assert "error" in r.json() and len(r.json()["error"].splitlines()) == 1

        def reset_twice():
            sid = client.post(
                "/v1/sessions", json={"env": "Sokoban-v0", "kwargs": SOKO, "count": 1}
            )
            sid = sid.json()["sessions"][0]
            for _ in range(5):
                item = {"session": sid, "seed": 1, "options": None}
                assert client.post("/v1/reset", json={"items": [item]}).status_code == 200
            client.post("/v1/close", json={"sessions": [sid]})

        threads = [threading.Thread(target=reset_twice) for _ in range(4)]
        for t in threads:
            t.start()
        for t in threads:
            t.join(60)
        health = client.get("/v1/health").json()
    assert soko.proc.poll() is None and health["open_sessions"] == 0


def test_the_bearer_token_is_required_when_set():
    server = Server("Sokoban-v0", "--workers", "0", token="s3cret")
    try:
        assert httpx.get(server.url + "/v1/health").status_code == 401
        with pytest.raises(RuntimeError, match="401"):
            make_pool([EnvSpec("Sokoban-v0")], backend="http", http_urls=[server.url])
        pool = make_pool(
            [EnvSpec("Sokoban-v0")], backend="http", http_urls=[server.url], http_token="s3cret"
        )
        with pool:
            assert len(pool.reset(seeds=[0])) == 1
    finally:
        server.stop()


def test_bad_server_command_lines_exit_2_with_one_line():
    for args in (["NoSuchEnv-v0"], ["Sokoban-v0", "--kwargs", "dimm=5"]):
        out = subprocess.run(
            [sys.executable, "-m", "agentrl.pool.serve", *args, "--port", "0"],
            capture_output=True, text=True, cwd=ROOT, timeout=60,
        )  # fmt: skip
        assert out.returncode == 2 and len(out.stderr.strip().splitlines()) == 1, out.stderr


json_values = st.recursive(
    st.none() | st.booleans() | st.integers() | st.floats() | st.text(max_size=5),
    lambda inner: (
        st.lists(inner, max_size=3)
        | st.tuples(inner, inner)
        | st.dictionaries(
            st.text(max_size=4).filter(lambda k: not k.startswith("$")), inner, max_size=3
        )
    ),
    max_leaves=10,
)


def _same(a, b) -> bool:
    if isinstance(a, float) and math.isnan(a):
        return isinstance(b, float) and math.isnan(b)
    if isinstance(a, list | tuple):
        return type(a) is type(b) and len(a) == len(b) and all(map(_same, a, b))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(_same(a[k], b[k]) for k in a)
    return a == b and type(a) is type(b)


@given(json_values)
def test_wire_codec_round_trips_through_json(value):
    assert _same(from_wire(json.loads(json.dumps(to_wire(value), allow_nan=False))), value)


def test_wire_codec_names_what_it_cannot_carry():
    with pytest.raises(WireError, match=r"info\['tags'\] \(set\)"):
        to_wire({"tags": {"a"}}, "info")
    with pytest.raises(WireError, match="keys must be strings"):
        to_wire({1: 2}, "info")


def test_training_runs_on_env_servers(tmp_path):
    """Two iterations of the default recipe with its envs on a server (the default env config's
    kwargs: a server serves exactly what the client asks for)."""
    kwargs = ["dim_room=5", "num_boxes=1", "open_room=true", "search_depth=1", "max_steps=10"]
    server = Server("Sokoban-v0", "--kwargs", *kwargs, "--workers", "1")
    try:
        out = subprocess.run(
            [sys.executable, "-m", "agentrl.train", "env.backend=http",
             f"env.http.urls=[{server.url}]", "trainer.iterations=2", "rollout.tasks_per_iter=2",
             "rollout.group_size=2", "env.eval_episodes=4", f"output_dir={tmp_path}"],
            capture_output=True, text=True, cwd=ROOT, timeout=600,
        )  # fmt: skip
    finally:
        server.stop()
    assert out.returncode == 0, out.stderr[-2000:]
    rows = [json.loads(line) for line in (tmp_path / "metrics.jsonl").read_text().splitlines()]
    assert [r["iteration"] for r in rows if r.get("phase") == "train"] == [1, 2]
