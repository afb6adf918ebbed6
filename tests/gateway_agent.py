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
