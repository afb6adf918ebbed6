"""A smolagents agent that answers Search-v0's questions through the env's own tools.

The program is plain smolagents: a ``ToolCallingAgent`` on an ``OpenAIServerModel`` whose
``api_base`` and ``api_key`` are the session's, with Search-v0's ``search(query)`` and
``answer(text)`` as ``@tool`` functions that run the env's commands. smolagents keeps its own
history (it replays past calls as text), so each call trains on its own exact prompt and the
gateway counts the rewrites as ``gateway/prefix_breaks`` (docs/agents.md). The program returns
the episode's reward with the env's state key before each model call, so step-level credit
(GiGPO's anchor states) works as with examples/agents/search_agent.py.

    python -m agentrl.train env=agent_search \\
        env.kwargs.agent=examples/agents/search_smolagent.py:play rollout.max_new_tokens=64
"""

from __future__ import annotations

import contextlib
from typing import Any

from agentrl.envs.tools import call_to_action
from smolagents import OpenAIServerModel, ToolCallingAgent, tool
from smolagents.agents import PromptTemplates
from smolagents.monitoring import LogLevel
from smolagents.utils import AgentError

from agentrl import envs

# The env's instruction replaces smolagents' default system prompt (about 1,500 tokens of
# examples), which would fill most of a small model's context.
SYSTEM = "{{ custom_instructions }}\nCall one tool per turn."
MAX_STEPS = 3


def play(base_url: str, api_key: str, task: dict) -> dict:
    """One episode of ``task`` (``id``, ``env``, ``env_kwargs``); its reward and state keys."""
    env = envs.make(task["env"], **task.get("env_kwargs", {}))
    try:
        obs, info = env.reset(options={"task_id": task["id"]})
        actions = info.get("tool_actions")
        state: dict[str, Any] = {"info": info, "total": 0.0, "done": False}
        keys: list[str] = []

        def act(name: str, args: dict[str, str]) -> str:
            """Run one tool call as the env's command; the observation is the tool's result."""
            if state["done"]:
                return "The episode is over."
            obs, reward, terminated, truncated, state["info"] = env.step(
                call_to_action(name, args, actions)
            )
            state["total"] += reward
            state["done"] = bool(terminated or truncated)
            return obs

        @tool
        def search(query: str) -> str:
            """Search the corpus; returns the best passages for the query.

            Args:
                query: the search query
            """
            return act("search", {"query": query})

        @tool
        def answer(text: str) -> str:
            """Give the final answer (a few words); ends the episode.

            Args:
                text: the answer
            """
            return act("answer", {"text": text})

        class Model(OpenAIServerModel):
            """The session's endpoint; notes the env's state key before each call."""

            def generate(self, *args: Any, **kwargs: Any):
                keys.append(str(state["info"]["state_key"]))
                return super().generate(*args, **kwargs)

        model = Model(model_id="policy", api_base=base_url, api_key=api_key,
                      client_kwargs={"max_retries": 0}, max_tokens=64)  # fmt: skip
        templates = PromptTemplates(
            system_prompt=SYSTEM,
            planning={
                "initial_plan": "",
                "update_plan_pre_messages": "",
                "update_plan_post_messages": "",
            },  # fmt: skip
            managed_agent={"task": "", "report": ""},
            final_answer={"pre_messages": "", "post_messages": ""},
        )

        def stop_when_done(step: Any, agent: ToolCallingAgent) -> None:
            """The env ended the episode: no further model call (smolagents' own interrupt)."""
            if state["done"]:
                agent.interrupt()

        agent = ToolCallingAgent(tools=[search, answer], model=model, prompt_templates=templates,
                                 instructions=info["instruction"], max_steps=MAX_STEPS,
                                 step_callbacks=[stop_when_done], verbosity_level=LogLevel.OFF)  # fmt: skip
        # interrupted once the env ended, or smolagents gave up: the reward stands
        with contextlib.suppress(AgentError):
            agent.run(obs)
        return {"reward": state["total"], "success": bool(state["info"].get("won")),
                "state_keys": keys}  # fmt: skip
    finally:
        env.close()
