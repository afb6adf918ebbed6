"""OpenEnv both ways, against the real ``openenv-core`` package on loopback.

- agentrl -> OpenEnv: ``python -m agentrl.envs.openenv serve Sokoban-v0`` in a real subprocess,
  played by OpenEnv's own ``GenericEnvClient`` (expert episodes win, and match the local env
  step by step);
- OpenEnv -> agentrl: ``envs.make("OpenEnv-v0", url=...)`` on that server passes the contract
  checker and plays through the env pool; on a server built with OpenEnv's own ``Environment``
  base class and ``create_fastapi_app`` (not ours: JSON actions, no agentrl fields), the
  fallbacks of the field mapping hold; bad actions never raise; server errors name the URL.
"""

from __future__ import annotations

import contextlib
import gc
import json
import os
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path
from typing import NamedTuple

import pytest

openenv_core = pytest.importorskip("openenv.core", reason="needs the openenv extra")

import uvicorn  # noqa: E402
from agentrl.envs.contract import check_contract  # noqa: E402
from agentrl.envs.openenv import OpenEnvEnv, OpenEnvServerError  # noqa: E402
from agentrl.envs.openenv.cli import main as cli_main  # noqa: E402
from agentrl.envs.openenv.mapping import InfoFields, derive_info  # noqa: E402
from openenv.core import GenericEnvClient  # noqa: E402
from openenv.core.env_server import (  # noqa: E402
    Action,
    Environment,
    Observation,
    State,
    create_fastapi_app,
)

from agentrl import envs  # noqa: E402
from agentrl.pool import EnvPool, EnvSpec  # noqa: E402

ROOT = Path(__file__).resolve().parents[2]
SOKO = {"dim_room": 5, "max_steps": 10}
SOKO_ARGS = ["--kwargs", "dim_room=5", "max_steps=10"]


class Served(NamedTuple):
    url: str
    log: Path


@pytest.fixture(scope="module")
def served_sokoban(tmp_path_factory):
    """The CLI serving Sokoban on a free loopback port; yields its URL; always terminated.
    Its stderr goes to a file (an unread pipe would fill and block the server)."""
    log = (tmp_path_factory.mktemp("openenv") / "server.err").open("w+")
    env_vars = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join([str(ROOT), os.environ.get("PYTHONPATH", "")]),
    }
    cmd = [sys.executable, "-m", "agentrl.envs.openenv", "serve", "Sokoban-v0", *SOKO_ARGS]
    cmd += ["--port", "0", "--max-sessions", "64"]
    proc = subprocess.Popen(
        cmd, cwd=ROOT, env=env_vars, stdout=subprocess.PIPE, stderr=log, text=True
    )
    try:
        line = proc.stdout.readline()
        assert line.startswith(
            "serving agentrl/Sokoban-v0 in OpenEnv's protocol on http://127.0.0.1:"
        ), line + Path(log.name).read_text()
        yield Served(line.split(" on ")[1].split()[0], Path(log.name))
    finally:
        proc.send_signal(signal.SIGTERM)
        try:
            proc.wait(15)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait(15)
        log.close()


def _local(seed: int):
    env = envs.make("Sokoban-v0", **SOKO)
    return env, *env.reset(seed=seed)


# -- agentrl -> OpenEnv: OpenEnv's own client on the served env ---------------------------------
def test_openenv_client_plays_an_expert_episode_to_a_win(served_sokoban):
    local, local_obs, local_info = _local(3)
    with GenericEnvClient(base_url=served_sokoban.url).sync() as client:
        result = client.reset(seed=3)
        obs = result.observation
        assert obs["text"] == local_obs and obs["task_id"] == "3" and result.done is False
        assert obs["state_key"] == local_info["state_key"] and obs["admissible_actions"]
        bad = client.step({"text": "jump"})  # junk is an invalid action, not an error
        assert bad.observation["action_valid"] is False and bad.reward == local.step("jump")[1]
        assert bad.observation["state_key"] == obs["state_key"]
        total, steps = 0.0, 0
        while not result.done:
            state = client.state()
            assert state["task_id"] == "3" and state["state_key"] == local.state.key()
            action = state["expert_action"]
            assert action == local.expert_action()
            result = client.step({"text": action})
            local_obs, local_reward, term, trunc, local_info = local.step(action)
            assert result.observation["text"] == local_obs and result.reward == local_reward
            assert result.done == (term or trunc)
            total, steps = total + result.reward, steps + 1
        assert result.observation["won"] is True and result.observation["score"] == 1.0
        assert result.observation["truncated"] is False
        assert steps == local_info["optimal_steps"] and total == pytest.approx(
            10.0 + 1 - 0.1 * steps
        )
        assert client.state()["step_count"] == steps + 1  # the junk step counts
    time.sleep(0.3)  # the session has ended: the server logged no traceback for it
    assert "Traceback" not in served_sokoban.log.read_text()


def test_served_env_replays_a_task_and_reports_truncation(served_sokoban):
    with GenericEnvClient(base_url=served_sokoban.url).sync() as client:
        first = client.reset(seed=5).observation
        again = client.reset(task_id=first["task_id"]).observation
        assert again["text"] == first["text"] and again["state_key"] == first["state_key"]
        for _ in range(SOKO["max_steps"]):
            result = client.step({"text": "nonsense"})
        assert result.done and result.observation["truncated"] and not result.observation["won"]
        with pytest.raises(RuntimeError, match="VALIDATION_ERROR"):
            client.step({"move": "up"})  # not the action schema: OpenEnv's validation answers


# -- OpenEnv -> agentrl: the adapter on the served env ------------------------------------------
def test_adapter_passes_the_contract_over_the_wire(served_sokoban):
    rules = ("gymnasium", "info", "seed", "replay", "state_key", "invalid", "admissible", "expert")
    results = check_contract(
        lambda: envs.make("OpenEnv-v0", url=served_sokoban.url),
        seeds=(0, 1),
        max_steps=10,
        rules=rules,
    )
    assert [r.rule for r in results] == list(rules)
    assert all(r.ok for r in results), "\n".join(r.line() for r in results)


def test_adapter_matches_the_local_env_step_by_step(served_sokoban):
    env = envs.make("OpenEnv-v0", url=served_sokoban.url)
    assert isinstance(env, OpenEnvEnv) and (env.action_field, env.observation_field) == (
        "text",
        "text",
    )
    local, local_obs, local_info = _local(2)  # a 4-step room
    obs, info = env.reset(seed=2)
    # every key of the local info: the contract's, Sokoban's own and its tool declaration
    assert obs == local_obs and {k: info[k] for k in local_info} == local_info
    try:
        for t in range(SOKO["max_steps"]):
            assert env.expert_action() == local.expert_action()
            junk = {0: "  ", 1: "<action>up</action>"}
            action = junk.get(t) or local.expert_action().upper()  # moves are case-insensitive
            obs, reward, term, trunc, info = env.step(action)
            want = local.step(action)
            assert (obs, reward, term, trunc) == want[:4], action
            # a step's info: the contract's keys and Sokoban's own (the tools are reset-only)
            assert {k: info[k] for k in want[4]} == want[4] and info["openenv_reward"] == reward
            if term or trunc:
                break
        assert info["won"] and term and env.current_observation() == obs
    finally:
        env.close()


def test_adapter_plays_through_the_env_pool(served_sokoban):
    seeds = [0, 1, 2]
    pool = EnvPool([EnvSpec("OpenEnv-v0", {"url": served_sokoban.url})] * len(seeds), num_workers=0)
    try:
        starts = pool.reset(seeds=seeds)
        assert [info["task_id"] for _, info in starts] == ["0", "1", "2"]
        live, won, steps = [0, 1, 2], {}, 0
        while live and steps < SOKO["max_steps"]:
            actions = pool.call(live, "expert_action")
            results = pool.step(live, actions)
            steps += 1
            for i, r in zip(list(live), results):
                assert "error" not in r.info, r.info
                if r.terminated or r.truncated:
                    won[i] = r.info["won"]
                    live.remove(i)
        assert won == {0: True, 1: True, 2: True}
    finally:
        pool.close()


# -- OpenEnv -> agentrl: a server that is not agentrl's ----------------------------------------
class CountAction(Action):
    move: int


class CountObservation(Observation):
    board: str = ""
    left: int = 0


class CountdownEnvironment(Environment[CountAction, CountObservation, State]):
    """Count down from 3 + seed % 5 to exactly 0 with moves of 1-3: reward 1 at 0, 0 past it.
    A move above 10 makes ``step`` raise (an env bug, answered as an execution error)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def __init__(self):
        super().__init__()
        self.left, self.steps = 0, 0

    def reset(self, seed=None, episode_id=None, **kwargs):
        self.left, self.steps, self.episode = 3 + (seed or 0) % 5, 0, episode_id
        return CountObservation(board=f"left: {self.left}", left=self.left)

    def step(self, action, timeout_s=None, **kwargs):
        if action.move > 10:
            raise ValueError(f"move {action.move} is too large")
        self.steps += 1
        if 1 <= action.move <= 3:
            self.left -= action.move
        done = self.left <= 0
        reward = 1.0 if self.left == 0 else 0.0
        return CountObservation(
            board=f"left: {self.left}", left=self.left, reward=reward, done=done
        )

    @property
    def state(self):
        return State(episode_id=getattr(self, "episode", None), step_count=self.steps)


@pytest.fixture()
def countdown():
    """OpenEnv's own app around :class:`CountdownEnvironment`, on loopback in a thread."""
    app = create_fastapi_app(
        CountdownEnvironment, CountAction, CountObservation, max_concurrent_envs=8
    )
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and thread.is_alive() and time.monotonic() < deadline:
            time.sleep(0.01)
        assert server.started, "the OpenEnv test server did not start"
        yield f"http://127.0.0.1:{sock.getsockname()[1]}", server
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_adapter_derives_info_on_a_foreign_server(countdown):
    url, _ = countdown
    env = envs.make("OpenEnv-v0", url=url, category="countdown", instruction="reach 0")
    try:
        assert env.action_field is None and env.observation_field == "board"
        obs, info = env.reset(seed=3)  # 6 left
        assert obs == "left: 6" and info["task_id"] == "seed:3" and info["category"] == "countdown"
        assert info["instruction"] == "reach 0" and info["admissible_actions"] is None
        start_key = info["state_key"]
        for junk in ["two", "[2]", '{"move": "x"}', '{"jump": 1}', "\x00"]:
            obs, reward, term, trunc, info = env.step(junk)
            assert not info["action_valid"] and info["state_key"] == start_key and obs == "left: 6"
            assert (reward, term, trunc) == (0.0, False, False)
        obs, reward, term, _, info = env.step('{"move": 3}')
        assert obs == "left: 3" and info["action_valid"] and info["state_key"] != start_key
        obs, reward, term, trunc, info = env.step('{"move": 3}')
        assert (obs, reward, term, trunc) == ("left: 0", 1.0, True, False)
        assert info["won"] and info["score"] == 1.0
        with pytest.raises(NotImplementedError, match="no expert"):
            env.expert_action()
        again = envs.make("OpenEnv-v0", url=url)
        assert again.reset(options={"task_id": "seed:3"})[1]["state_key"] == start_key
        again.close()
        env.reset(seed=0)  # 3 left: overshooting ends the episode unsolved
        *_, term, trunc, info = env.step('{"move": 4}')  # 4 is a no-op, not an error
        assert not term and info["action_valid"]
        *_, term, trunc, info = env.step('{"move": 2}')
        *_, term, trunc, info = env.step('{"move": 2}')
        assert term and not info["won"] and info["score"] == 0.0
    finally:
        env.close()


def test_adapter_contract_on_a_foreign_server(countdown):
    url, _ = countdown
    results = check_contract(
        lambda: envs.make("OpenEnv-v0", url=url),
        seeds=(0, 1),
        max_steps=6,
        rules=("info", "seed", "replay", "state_key", "invalid"),
    )
    assert all(r.ok for r in results), "\n".join(r.line() for r in results)


def test_adapter_truncates_at_max_steps_and_reads_mapped_fields(countdown):
    url, _ = countdown
    env = envs.make("OpenEnv-v0", url=url, max_steps=2, fields={"state_key": "left"})
    try:
        _, info = env.reset(seed=4)  # 7 left
        assert info["state_key"] == "7"
        assert env.step('{"move": 1}')[3] is False
        obs, _, term, trunc, info = env.step("not json")
        assert (obs, term, trunc, info["state_key"]) == ("left: 6", False, True, "6")
    finally:
        env.close()


def test_server_errors_name_the_url(countdown):
    url, server = countdown
    env = envs.make("OpenEnv-v0", url=url)
    env.reset(seed=1)
    with pytest.raises(OpenEnvServerError, match=f"OpenEnv server at {url}: step: .*too large"):
        env.step('{"move": 11}')
    server.should_exit = True  # the server goes away mid-episode
    time.sleep(0.5)
    with pytest.raises(OpenEnvServerError, match=f"OpenEnv server at {url}: step failed"):
        env.step('{"move": 1}')
    with pytest.raises(OpenEnvServerError, match="session of this episode was lost; reset"):
        env.step('{"move": 1}')
    env.close()
    with pytest.raises(OpenEnvServerError, match=f"OpenEnv server at {url}: cannot read /schema"):
        envs.make("OpenEnv-v0", url=url, connect_timeout=2)


def test_a_full_server_is_named_and_dropped_envs_free_their_sessions(countdown):
    url, _ = countdown  # 8 sessions
    held = [envs.make("OpenEnv-v0", url=url) for _ in range(8)]
    for env in held:
        env.reset(seed=0)
    extra = envs.make("OpenEnv-v0", url=url)
    with pytest.raises(OpenEnvServerError, match="are all its sessions in use"):
        extra.reset(seed=0)
    del held, env  # dropped without close(): garbage collection ends their sessions
    gc.collect()
    time.sleep(0.3)
    assert extra.reset(seed=1)[0] == "left: 4"  # and the next reset opens a new session
    extra.close()


def test_bad_settings_are_clear_errors(countdown):
    url, _ = countdown
    with pytest.raises(
        ValueError, match=r"action_field: .* no field 'text' \(its fields: metadata, move\)"
    ):
        envs.make("OpenEnv-v0", url=url, action_field="text")
    with pytest.raises(ValueError, match="unknown info key"):
        envs.make("OpenEnv-v0", url=url, fields={"reward": "left"})
    with pytest.raises(ValueError, match="http:// or https://"):
        envs.make("OpenEnv-v0", url="127.0.0.1:1")
    env = envs.make("OpenEnv-v0", url=url, task_id_field=None)
    with pytest.raises(ValueError, match="replays only 'seed:N'"):
        env.reset(options={"task_id": "7"})
    env.close()


def test_mapping_rejects_values_that_break_the_contract():
    common = dict(reward=1.0, done=True, fields=InfoFields(), instruction="", category="c",
                  fallback_task_id="", success_reward=1.0)  # fmt: skip
    named = {**common, "fields": InfoFields.with_overrides({"score": "score", "won": "won"})}
    with pytest.raises(ValueError, match=r"score must lie in \[0, 1\]"):
        derive_info({"score": 1.5}, None, **named)
    with pytest.raises(ValueError, match="won must be a boolean"):
        derive_info({"won": 1}, None, **named)
    # not named: the server's field of the same name means something else, set aside
    out = derive_info({"score": 57, "won": 1}, None, **common)
    assert out.foreign == {"score": 57, "won": 1} and out.values["score"] == 1.0
    out = derive_info({"x": 1}, {"task_id": 9, "state_key": [1, 2], "step_count": 3}, **common)
    assert out.values["task_id"] == "9" and json.loads(out.values["state_key"]) == [1, 2]
    assert out.values["won"] and out.terminated and not out.truncated


def test_cli_start_up_problems_exit_2(capsys):
    assert cli_main(["serve", "Sokobn-v0"]) == 2
    err = capsys.readouterr().err.strip().splitlines()
    assert len(err) == 1 and "unknown environment 'Sokobn-v0'; did you mean Sokoban-v0" in err[0]
    assert cli_main(["serve", "Sokoban-v0", "--kwargs", "max_steps=0"]) == 2
    assert "max_steps must be >= 1" in capsys.readouterr().err
    assert cli_main(["serve", "Sokoban-v0", "--kwargs", "oops"]) == 2
    assert "KEY=VALUE" in capsys.readouterr().err


# -- hardening: what a client may not do to a served env, what a foreign server may not do ----
@contextlib.contextmanager
def _serving(app):
    """``app`` on a free loopback port in a thread; yields its URL."""
    sock = socket.socket()
    sock.bind(("127.0.0.1", 0))
    sock.listen(64)
    server = uvicorn.Server(uvicorn.Config(app, log_level="warning"))
    thread = threading.Thread(target=server.run, kwargs={"sockets": [sock]}, daemon=True)
    thread.start()
    try:
        deadline = time.monotonic() + 20
        while not server.started and time.monotonic() < deadline:
            time.sleep(0.01)
        yield f"http://127.0.0.1:{sock.getsockname()[1]}"
    finally:
        server.should_exit = True
        thread.join(10)
        sock.close()


def test_mcp_tool_client_plays_the_served_env(served_sokoban):
    """OpenEnv's MCPToolClient (over /ws in openenv-core 0.3.0, over POST /mcp in openenv
    0.10): the env's tools are listed and a call moves the player."""
    from openenv.core.mcp_client import MCPToolClient

    with MCPToolClient(base_url=served_sokoban.url).sync() as client:
        client.reset(seed=3)
        tools = client.list_tools()
        assert [t.name for t in tools] == ["move"]
        assert tools[0].input_schema["properties"]["direction"]["enum"] == [
            "up", "down", "left", "right"
        ]  # fmt: skip
        room = client.call_tool("move", direction="up")
        assert isinstance(room, str) and "P" in room or "S" in room
        with pytest.raises(RuntimeError, match="direction"):
            client.call_tool("move", direction="north")


def test_served_env_refuses_attacks_while_a_canary_plays(served_sokoban):
    import httpx
    from websockets.sync.client import connect

    url = served_sokoban.url
    local, local_obs, _ = _local(2)
    with (
        GenericEnvClient(base_url=url).sync() as canary,
        GenericEnvClient(base_url=url).sync() as attacker,
    ):
        assert canary.reset(seed=2).observation["text"] == local_obs
        room = "#" * 9 + "\n#P" + "_X" * 3 + "#\n" + "#O" * 4 + "#\n" + "#" * 9
        attacks = [
            lambda: attacker.reset(seed=1, room=room),  # a client-written task: refused
            lambda: httpx.get(url + "/health", headers={"host": "attacker.example"}),
            lambda: httpx.post(url + "/reset", json={}, headers={"origin": "http://a.example"}),
            lambda: httpx.post(url + "/reset", content=b"{" + b" " * 2**21 + b"}"),
            lambda: httpx.post(url + "/step", json={"action": {"text": "up"}}),
            lambda: connect(url.replace("http", "ws") + "/ws", origin="http://a.example"),
            lambda: attacker.step({"text": "u" * 3_800_000}),  # a 3.8 MB WebSocket message
        ]
        outcomes = []
        while True:
            for attack in attacks[:2]:  # two attacks between two canary steps
                attacks.remove(attack)
                try:
                    outcomes.append(attack())
                except Exception as exc:  # noqa: BLE001 - the refusals the server sends
                    outcomes.append(exc)
            action = canary.state()["expert_action"]
            result = canary.step({"text": action})
            obs, reward, term, trunc, _ = local.step(action)
            assert (result.observation["text"], result.reward) == (obs, reward)
            if term or trunc:
                break
        for _ in attacks:  # any left once the canary won
            outcomes.append(None)
    room_refused, host, origin, body, step, ws_origin, big = outcomes
    assert isinstance(room_refused, RuntimeError) and "not allowed" in str(room_refused)
    assert host.status_code == 403 and origin.status_code == 403
    assert body.status_code == 413 and "limit" in body.json()["error"]
    assert step.status_code == 409 and "/ws session" in step.json()["error"]
    assert isinstance(ws_origin, Exception) and isinstance(big, Exception)
    assert "Traceback" not in served_sokoban.log.read_text()


def test_mcp_sessions_without_a_connection_expire():
    import httpx
    from agentrl.envs.openenv import create_openenv_app

    app = create_openenv_app("Sokoban-v0", SOKO, max_sessions=2, session_timeout=1)
    with _serving(app) as url:

        def create():
            body = {"jsonrpc": "2.0", "method": "openenv/session/create", "params": {}, "id": 1}
            return httpx.post(url + "/mcp", json=body).json()

        assert all("result" in create() for _ in range(2))  # held by no connection
        assert "error" in create()  # the server is full
        deadline = time.monotonic() + 15  # the reaper looks every 5 s
        while "error" in (reply := create()) and time.monotonic() < deadline:
            time.sleep(0.5)
        assert "result" in reply


def test_state_does_not_stall_the_server_while_an_expert_is_slow():
    import httpx
    from agentrl.envs.openenv import create_openenv_app
    from agentrl.envs.sokoban import SokobanEnv

    class Slow(SokobanEnv):
        def expert_action(self):
            time.sleep(1.5)
            return super().expert_action()

    envs.register("SlowExpertSokoban-v0", Slow)
    app = create_openenv_app("SlowExpertSokoban-v0", SOKO, max_sessions=2)
    with _serving(app) as url, GenericEnvClient(base_url=url).sync() as client:
        client.reset(seed=2)
        t0 = time.monotonic()
        assert client.state()["expert_action"] in ("up", "down", "left", "right")
        assert time.monotonic() - t0 < 0.5
        stepping = threading.Thread(target=client.step, args=({"text": "up"},))
        stepping.start()  # the expert of the next state runs 1.5 s in a worker thread
        time.sleep(0.2)
        t0 = time.monotonic()
        assert httpx.get(url + "/health").status_code == 200
        assert time.monotonic() - t0 < 0.5
        stepping.join(10)


class OddAction(Action):
    move: int


class OddObservation(Observation):
    board: str = ""
    score: int = 0  # points 0-100: not agentrl's score


class OddEnvironment(Environment[OddAction, OddObservation, State]):
    """A foreign env: a 0-100 ``score``, a NaN reward for move 9, a 150,000-character board
    for move 8, and a reset that declares no seed (OpenEnv drops it)."""

    SUPPORTS_CONCURRENT_SESSIONS = True

    def reset(self, episode_id=None):
        self.episode = episode_id if episode_id == "fixed" else None
        return OddObservation(board="start", score=57)

    def step(self, action, timeout_s=None, **kwargs):
        reward = float("nan") if action.move == 9 else 0.5
        board = "x" * 150_000 if action.move == 8 else f"moved {action.move}"
        return OddObservation(board=board, score=60, reward=reward, done=False)

    @property
    def state(self):
        return State(episode_id=self.episode, step_count=0)


def test_adapter_on_a_server_whose_fields_mean_other_things():
    app = create_fastapi_app(OddEnvironment, OddAction, OddObservation, max_concurrent_envs=2)
    with _serving(app) as url:
        env = envs.make("OpenEnv-v0", url=url)
        try:
            with pytest.warns(UserWarning) as caught:
                obs, info = env.reset(seed=4)
            text = " ".join(str(w.message) for w in caught)
            assert "'score' (57) is not agentrl's score" in text and "did not take" in text
            assert info["score"] == 0.0 and info["openenv_score"] == 57
            assert info["task_id"] == ""  # the seed was dropped: no "seed:4" claimed
            obs, reward, *_, info = env.step('{"move": 8}')
            assert len(obs) == 100_000 and env.observation_space.contains(obs)
            assert info["openenv_observation_chars"] == 150_000 and reward == 0.5
            with pytest.raises(OpenEnvServerError, match="reward null"):
                env.step('{"move": 9}')  # NaN reaches the client as null
        finally:
            env.close()


def test_the_checker_needs_one_session_at_a_time():
    app = create_fastapi_app(
        CountdownEnvironment, CountAction, CountObservation, max_concurrent_envs=1
    )
    with _serving(app) as url:
        results = check_contract(
            lambda: envs.make("OpenEnv-v0", url=url),
            seeds=(0, 1),
            max_steps=6,
            rules=("info", "seed", "replay", "state_key", "invalid"),
        )
    assert all(r.ok for r in results), "\n".join(r.line() for r in results)
