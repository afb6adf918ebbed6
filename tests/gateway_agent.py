"""An agent program for tests/test_gateway.py: the ``openai`` SDK's tool loop, two calls per
episode, its reward posted to the session (not returned); the task ``boom`` raises."""

from __future__ import annotations

import httpx
from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look a name up.",
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string"}},
                "required": ["name"],
            },
        },
    }
]


def play(base_url: str, api_key: str, task: dict) -> None:
    if task["id"] == "boom":
        raise RuntimeError("this task always fails")
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "user", "content": task["question"]}]
    lengths = []
    for turn in range(2):
        reply = client.chat.completions.create(
            model="policy", messages=messages, tools=TOOLS, max_tokens=6
        )
        msg = reply.choices[0].message
        lengths.append(len(msg.content or ""))
        messages.append(msg.model_dump(exclude_none=True))
        messages.append({"role": "user", "content": f"turn {turn + 1}: go on"})
    reward = float(lengths[-1] % 2 == 0)  # varies between rollouts: the groups have a signal
    httpx.post(f"{base_url}/sessions/{api_key}/reward", json={"reward": reward}).raise_for_status()


def shaped(base_url: str, api_key: str, task: dict) -> dict:
    """Two calls; returns per-call rewards and state keys (step-level credit's inputs)."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [{"role": "user", "content": task["question"]}]
    for _ in range(2):
        msg = client.chat.completions.create(model="p", messages=messages, max_tokens=4)
        messages += [msg.choices[0].message.model_dump(exclude_none=True),
                     {"role": "user", "content": "again"}]  # fmt: skip
    return {"reward": 1.0, "step_rewards": [0.25, 0.75], "state_keys": ["start", "middle"],
            "success": True}  # fmt: skip


def with_client(task: dict, client: OpenAI) -> float:
    """The other signature: the task and an OpenAI client already bound to the session."""
    client.chat.completions.create(model="p", messages=[{"role": "user", "content": task["question"]}],
                                   max_tokens=3)  # fmt: skip
    return 0.5


def silent(base_url: str, api_key: str, task: dict) -> float:
    """Never calls the model."""
    return 1.0


def hangs(base_url: str, api_key: str, task: dict) -> float:
    """Calls once, then waits past any timeout a test sets."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    client.chat.completions.create(model="p", messages=[{"role": "user", "content": "hi"}],
                                   max_tokens=2)  # fmt: skip
    import time

    time.sleep(3)
    return 1.0


if __name__ == "__main__":  # the command form: the session comes from the environment
    import json
    import os

    task = json.loads(os.environ["AGENTRL_TASK"])
    client = OpenAI(max_retries=0)  # OPENAI_BASE_URL and OPENAI_API_KEY
    client.chat.completions.create(model="p", messages=[{"role": "user", "content": task["question"]}],
                                   max_tokens=3)  # fmt: skip
    print("progress lines are fine")
    print(json.dumps({"reward": 0.5}))
