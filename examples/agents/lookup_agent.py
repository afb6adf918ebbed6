"""An agent program written for any OpenAI endpoint: it looks facts up with a tool, then answers.

Nothing here knows agentrl. It takes an endpoint, an API key and a task, and runs the ordinary
``openai`` tool loop: the model calls ``lookup(name)`` (answered from the task's facts) until it
calls ``answer(text)``, which ends the episode with reward 1 for the right answer, else 0.

Trained by agentrl with (docs/agents.md)::

    python -m agentrl.train env=agent \\
        env.kwargs.agent=examples/agents/lookup_agent.py:play \\
        rollout.max_new_tokens=64

Run against any server by hand::

    python examples/agents/lookup_agent.py http://127.0.0.1:8000/v1 my-session
"""

from __future__ import annotations

import json
import sys

from openai import OpenAI

TOOLS = [
    {
        "type": "function",
        "function": {
            "name": "lookup",
            "description": "Look up what is known about a name.",
            "parameters": {
                "type": "object",
                "properties": {"name": {"type": "string", "description": "the name"}},
                "required": ["name"],
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "answer",
            "description": "Give the final answer.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "the answer"}},
                "required": ["text"],
            },
        },
    },
]


def play(base_url: str, api_key: str, task: dict, max_turns: int = 3) -> float:
    """One episode of ``task`` (``question``, ``facts``, ``answer``); returns the reward."""
    client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0)
    messages = [
        {"role": "system", "content": "Answer the question. Use the tools."},
        {"role": "user", "content": task["question"]},
    ]
    for _ in range(max_turns):
        reply = client.chat.completions.create(
            model="policy", messages=messages, tools=TOOLS, max_tokens=48
        )
        msg = reply.choices[0].message
        messages.append(msg.model_dump(exclude_none=True))
        if not msg.tool_calls:  # text instead of a call: the episode ends unanswered
            return 0.0
        for call in msg.tool_calls:
            args = json.loads(call.function.arguments)
            if call.function.name == "answer":
                return float(str(args.get("text", "")).strip().lower() == task["answer"].lower())
            fact = task["facts"].get(str(args.get("name", "")), "nothing is known")
            messages.append({"role": "tool", "tool_call_id": call.id, "content": fact})
    return 0.0


if __name__ == "__main__":
    url, key = sys.argv[1], sys.argv[2]
    example = {"question": "Where does A live?", "facts": {"A": "A lives in B."}, "answer": "B"}
    print(play(url, key, example))
