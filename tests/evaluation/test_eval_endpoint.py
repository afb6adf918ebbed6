"""The endpoint agent against a real OpenAI-compatible HTTP server started on loopback."""

from __future__ import annotations

import socket

import pytest
from chat_server import ChatServer
from eval_envs import SMALL

from agentrl import envs
from agentrl.evaluation import summarize
from agentrl.evaluation.endpoint import EndpointAgent
from agentrl.evaluation.runner import EvaluationError, play_tasks
from agentrl.evaluation.tasks import derive_seed, make_tasks

SOK = "Sokoban-v0"


def agent(url, model="test-model", **kw):
    """The agent as `agent=endpoint` builds it: the trainer's prompt builder and parser."""
    return EndpointAgent.from_config({"base_url": url, "model": model, **kw})


def test_solver_behind_endpoint_wins_everything():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=20, seed=4)
    with ChatServer() as srv:
        a = agent(srv.base_url, temperature=0.0, max_tokens=16, concurrency=4)
        recs = play_tasks(SOK, tasks, a, env_kwargs=SMALL, num_envs=6)
        a.close()
    assert all(r.won and r.invalid_actions == 0 for r in recs)
    assert len(srv.requests) == sum(r.steps for r in recs) == a.requests
    body = srv.requests[0]
    assert body["model"] == "test-model" and body["temperature"] == 0.0 and body["max_tokens"] == 16
    seeds = {req["seed"] for req in srv.requests}
    assert (
        derive_seed(tasks[0].agent_seed, 0) in seeds
        and derive_seed(tasks[0].agent_seed, 1) in seeds
    )


def test_prompt_is_the_trainers_and_carries_history():
    from agentrl.rollout import PromptBuilder, PromptConfig, Turn

    tasks = make_tasks(SOK, SMALL, split="test", episodes=1)
    with ChatServer() as srv:
        srv.reply = lambda messages, body: "<action>left</action>"  # keeps the episode going
        a = agent(srv.base_url, prompt={"history": 2})
        (rec,) = play_tasks(SOK, tasks, a, env_kwargs=SMALL, max_steps=4)
        a.close()
    assert rec.steps == 4
    roles = [[m["role"] for m in req["messages"]] for req in srv.requests]
    assert roles[0] == ["system", "user"]
    assert roles[1] == ["system", "user", "assistant", "user"]
    assert roles[3] == ["system"] + ["user", "assistant"] * 2 + ["user"]  # only the last 2 pairs
    env = envs.make(SOK, **SMALL)
    obs0, info = env.reset(seed=tasks[0].seed, options={"task_id": tasks[0].task_id})
    obs1, *_ = env.step("left")
    want = PromptBuilder(None, PromptConfig(history=2)).messages(
        info["instruction"], [Turn(obs0, "<action>left</action>")], obs1, info["admissible_actions"]
    )
    assert srv.requests[1]["messages"] == want


def test_constrained_replies_list_the_admissible_actions():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=2)
    with ChatServer() as srv:
        a = agent(srv.base_url, constrain=True, extra_body={"top_k": 5})
        play_tasks(SOK, tasks, a, env_kwargs=SMALL)
        a.close()
    body = srv.requests[0]
    assert body["structured_outputs"] == {
        "choice": [f"<action>{x}</action>" for x in ("up", "down", "left", "right")]
    }
    assert body["top_k"] == 5


def test_unparseable_replies_count_as_invalid():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=4)
    with ChatServer() as srv:
        srv.reply = lambda messages, body: "I would like to move up please"
        a = agent(srv.base_url)
        recs = play_tasks(SOK, tasks, a, env_kwargs=SMALL, max_steps=3)
        a.close()
    assert [(r.steps, r.invalid_actions, r.won) for r in recs] == [(3, 3, False)] * 4
    assert summarize(recs).overall.invalid_action_rate == 1.0


def test_server_errors_are_retried():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=2)
    with ChatServer(fail_first=2) as srv:
        a = agent(srv.base_url, max_retries=3, concurrency=1)
        recs = play_tasks(SOK, tasks, a, env_kwargs=SMALL)
        a.close()
    assert all(r.won for r in recs)
    assert len(srv.requests) == 2 + sum(r.steps for r in recs)


def test_wrong_model_name_is_a_clear_error():
    tasks = make_tasks(SOK, SMALL, split="test", episodes=2)
    with ChatServer() as srv:
        a = agent(srv.base_url, model="no-such-model", max_retries=0)
        with pytest.raises(EvaluationError, match="HTTP 404.*no-such-model.*does not exist"):
            play_tasks(SOK, tasks, a, env_kwargs=SMALL)
        a.close()


def test_unreachable_endpoint_is_a_clear_error():
    with socket.socket() as s:  # a free port with nobody listening
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    a = agent(f"http://127.0.0.1:{port}/v1", max_retries=0, timeout=5)
    with pytest.raises(EvaluationError, match="unreachable"):
        play_tasks(SOK, make_tasks(SOK, SMALL, split="test", episodes=1), a, env_kwargs=SMALL)
    a.close()


@pytest.mark.parametrize(
    ("kw", "match"),
    [
        ({"concurrency": 0}, "concurrency"),
        ({"temperature": -1}, "temperature"),
        ({"max_tokens": 0}, "max_tokens"),
    ],
)
def test_bad_settings(kw, match):
    with pytest.raises(ValueError, match=match):
        agent("http://127.0.0.1:1/v1", **kw)


def test_config_needs_a_model():
    with pytest.raises(ValueError, match="agent.model"):
        EndpointAgent.from_config({"base_url": "http://127.0.0.1:1/v1", "model": None})
