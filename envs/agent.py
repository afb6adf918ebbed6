"""``agentrl/Agent-v0``: the task list of an agent program that plays its episodes itself.

Under ``env=agent`` the episode is played by the user's program (an OpenAI client talking to the
gateway), not by agentrl stepping an env. This env is what the rest of agentrl still needs from an
env: the task list (``task_ids``, seeded draws, categories, held-out split) and the program to run,
so task selection, groups, evaluation sets and the env pool work as for every other env.

Tasks: ``tasks`` is a JSON-lines file (default: a built-in list of lookup questions), one task a
line: ``id`` (required, unique), optional
``category``, and anything the program needs. ``eval_tasks`` (optional) holds the held-out tasks
(split ``test``); without it ``test`` lists the same tasks as ``train``. Or ``env`` names an
agentrl env whose task ids are the tasks (its ``train`` and ``test`` splits; a seeded reset
without a task id draws the task as that env's own seeded reset does, so ``env.train_tasks=seeds``
plays the questions the env itself would). ``reset`` returns the task as its JSON text (the
observation), with the program's settings in ``info["agent_program"]``; ``step`` ends the
episode (a program reports its reward through the gateway, not through this env).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from .base import TextEnv, make_info
from .registry import make

__all__ = ["AgentTasksEnv", "load_tasks", "lookup_tasks"]

INSTRUCTION = "Play the task with the agent program."


def lookup_tasks() -> list[dict[str, Any]]:
    """The built-in tasks (``tasks=null``): "Where does A live?", with the fact to look up, for
    the example lookup agent (examples/agents/lookup_agent.py)."""
    return [
        {"id": f"lookup-{i}", "category": "lookup", "question": f"Where does {n} live?",
         "facts": {n: f"{n} lives in {p}."}, "answer": p}
        for i, (n, p) in enumerate(zip("ABCDEFGHJK", "PQRSTUVWXY"))
    ]  # fmt: skip


def load_tasks(path: str | Path) -> list[dict[str, Any]]:
    """The tasks of a JSON-lines file; ``ValueError`` names the line that is wrong."""
    p = Path(path).expanduser()
    if not p.is_file():
        raise ValueError(f"agent tasks: no file {str(p)!r}")
    tasks, seen = [], set()
    for n, line in enumerate(p.read_text().splitlines(), 1):
        if not line.strip():
            continue
        try:
            task = json.loads(line)
        except ValueError as exc:
            raise ValueError(f"agent tasks {p.name}:{n}: not JSON ({exc.args[0][:60]})") from None
        if not isinstance(task, dict) or not isinstance(task.get("id"), str | int):
            raise ValueError(f"agent tasks {p.name}:{n}: a task is an object with an 'id'")
        tid = str(task["id"])
        if tid in seen:
            raise ValueError(f"agent tasks {p.name}:{n}: id {tid!r} appears twice")
        seen.add(tid)
        tasks.append(task)
    if not tasks:
        raise ValueError(f"agent tasks: {str(p)!r} holds no task")
    return tasks


class AgentTasksEnv(TextEnv):
    """The tasks of an agent program (see the module docstring).

    Args:
        tasks: JSON-lines file of the training tasks (``None``: the built-in lookup tasks).
        eval_tasks: JSON-lines file of the held-out tasks (default: ``tasks``).
        agent: ``MODULE:FUNCTION`` (or ``FILE.py:FUNCTION``), called per episode as
            ``FUNCTION(base_url, api_key, task)``, or ``FUNCTION(task, client)`` with an
            ``openai.OpenAI`` client bound to the episode's session.
        command: a command line run per episode instead (``OPENAI_BASE_URL``, ``OPENAI_API_KEY``,
            ``AGENTRL_TASK``, ``AGENTRL_REWARD_URL`` set).
        timeout: seconds an episode may take.
        env / env_kwargs: an agentrl env whose ``train`` and ``test`` task ids are the tasks
            (each task: ``id``, ``env``, ``env_kwargs``, ``category``), for a program that
            plays that env through its tools (examples/agents/search_agent.py).
    """

    def __init__(
        self,
        tasks: str | None = None,
        eval_tasks: str | None = None,
        agent: str | None = None,
        command: str | None = None,
        timeout: float = 120.0,
        env: str | None = None,
        env_kwargs: dict[str, Any] | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode)
        if env is not None and (tasks or eval_tasks):
            raise ValueError(
                "env=agent takes its tasks from env.kwargs.tasks or env.kwargs.env, not both"
            )
        if agent is not None and command is not None:
            raise ValueError("env=agent takes env.kwargs.agent or env.kwargs.command, not both")
        if agent is not None and (not isinstance(agent, str) or ":" not in agent):
            raise ValueError(f"env.kwargs.agent must read MODULE:FUNCTION, got {agent!r}")
        if not float(timeout) > 0:
            raise ValueError(f"env.kwargs.timeout must be > 0, got {timeout!r}")
        self.inner = None if env is None else make(env, **dict(env_kwargs or {}))
        if self.inner is not None:  # an agentrl env's tasks, by id (category read on reset)
            spec = {"env": env, "env_kwargs": dict(env_kwargs or {})}
            self.splits = {
                split: [{"id": tid, **spec} for tid in self.inner.task_ids(split)]
                for split in ("train", "test")
            }
        else:
            self.splits = {"train": load_tasks(tasks) if tasks else lookup_tasks()}
            self.splits["test"] = load_tasks(eval_tasks) if eval_tasks else self.splits["train"]
        self.program = {"agent": agent, "command": command, "timeout": float(timeout)}
        self.task: dict[str, Any] = self.splits["train"][0]

    def task_ids(self, split: str, limit: int | None = None) -> list[str]:
        if split not in self.splits:
            raise ValueError(f"Agent-v0 has splits train and test, not {split!r}")
        ids = [str(t["id"]) for t in self.splits[split]]
        return ids if limit is None else ids[:limit]

    def _info(self, **kw: Any) -> dict[str, Any]:
        return make_info(instruction=INSTRUCTION, task_id=str(self.task["id"]),
                         category=str(self.task.get("category", "")), admissible_actions=None,
                         state_key=str(self.task["id"]), **kw)  # fmt: skip

    def reset(self, *, seed: int | None = None, options: dict[str, Any] | None = None):
        super().reset(seed=seed)
        tid = (options or {}).get("task_id")
        if tid is not None:
            found = [
                t for s in ("test", "train") for t in self.splits[s] if str(t["id"]) == str(tid)
            ]
            if not found:
                raise ValueError(f"Agent-v0: no task {tid!r}")
            self.task = found[0]
        elif self.inner is not None:  # the inner env's own seeded draw (env.train_tasks=seeds)
            _, first = self.inner.reset(seed=seed)
            spec = {k: v for k, v in self.splits["train"][0].items() if k != "id"}
            self.task = {"id": str(first["task_id"]), **spec,
                         "category": str(first.get("category", ""))}  # fmt: skip
        else:
            train = self.splits["train"]
            self.task = train[int(self.np_random.integers(len(train)))]
        if self.inner is not None and "category" not in self.task:
            _, first = self.inner.reset(options={"task_id": self.task["id"]})
            self.task = {**self.task, "category": str(first.get("category", ""))}
        info = self._info(action_valid=True, won=False, score=0.0)
        info["agent_program"] = dict(self.program)
        return self.current_observation(), info

    def step(self, action: str):
        """Ends the episode: the program, not this env, plays it."""
        return (self.current_observation(), 0.0, True, False,
                self._info(action_valid=True, won=False, score=0.0))  # fmt: skip

    def current_observation(self) -> str:
        return json.dumps(self.task, ensure_ascii=False)

    def expert_action(self) -> str:
        return "done"
