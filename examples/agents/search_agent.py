"""An openai-SDK agent that answers Search-v0's questions through the env's own tools.

The program owns its loop: it makes the agentrl env named in its task and, every turn, offers the
env's tools (``info["tools"]``: ``search(query)``, ``answer(text)``) as OpenAI strict functions
whose arguments are enums of the turn's admissible queries and answers
(:func:`agentrl.envs.tools.admissible_tools`), with ``tool_choice="required"``: an endpoint that
enforces strict schemas (agentrl's gateway, OpenAI's) answers with one admissible call. It runs
the call as the env's command and sends the result back as a ``tool`` message, until the env ends
the episode. It returns the episode's reward with the env's state key before each call, so
step-level credit (GiGPO's anchor states) works through the gateway.

    python -m agentrl.train env=agent_search
"""

from __future__ import annotations

import functools
import json

from agentrl.envs.tools import admissible_tools, call_problem, call_to_action
from openai import DefaultHttpxClient, OpenAI

from agentrl import envs


@functools.cache
def _http() -> DefaultHttpxClient:
    """One HTTP client for every episode (making one costs about 40 ms of CPU); thread-safe."""
    return DefaultHttpxClient()


def play(base_url: str, api_key: str, task: dict) -> dict:
    """One episode of ``task`` (``id``, ``env``, ``env_kwargs``); its reward and state keys."""
    env = envs.make(task["env"], **task.get("env_kwargs", {}))
    try:
        obs, info = env.reset(options={"task_id": task["id"]})
        declared, actions = info["tools"], info.get("tool_actions")
        client = OpenAI(base_url=base_url, api_key=api_key, max_retries=0, http_client=_http())
        messages = [
            {"role": "system", "content": info["instruction"]},
            {"role": "user", "content": obs},
        ]
        keys, total, won = [], 0.0, False
        while True:
            keys.append(str(info["state_key"]))
            tools = admissible_tools(declared, actions, info.get("admissible_actions") or ())
            reply = client.chat.completions.create(
                model="policy",
                messages=messages,
                tools=tools or declared,
                tool_choice="required" if tools else "auto",
                max_tokens=64,
            )
            msg = reply.choices[0].message
            messages.append(msg.model_dump(exclude_none=True))
            if not msg.tool_calls:
                break  # text instead of a call: the episode ends here
            call = msg.tool_calls[0]
            args = json.loads(call.function.arguments)
            if call_problem(declared, call.function.name, args):
                break
            obs, reward, terminated, truncated, info = env.step(
                call_to_action(call.function.name, args, actions)
            )
            total += reward
            won = bool(info.get("won"))
            if terminated or truncated:
                break
            messages.append({"role": "tool", "tool_call_id": call.id, "content": obs})
        return {"reward": total, "success": won, "state_keys": keys}
    finally:
        env.close()
