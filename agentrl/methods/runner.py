"""The one runner builder: the episode runner a config describes, with its method's action format.

Training rollouts, the trainer's held-out evaluation and ``python -m agentrl.evaluate agent=model``
all play through a runner built by :func:`build_runner`, so a checkpoint is evaluated with the
prompt and action format it was trained with (the format a credit module asks for, with its prompt
hint, included).
"""

from __future__ import annotations

from dataclasses import asdict
from typing import Any

from ..backends.base import Backend
from ..config import TrainConfig
from ..pool import EnvPool
from ..rollout import ActionFormat, EpisodeRunner, PromptBuilder, PromptConfig, RunnerSettings
from .registry import format_hook, resolve_tool_syntax

__all__ = ["AGENT_ENV", "action_format", "build_runner"]

#: The env whose episodes an agent program plays through the gateway (``env=agent``).
AGENT_ENV = "Agent-v0"


def build_runner(
    cfg: TrainConfig,
    pool: EnvPool,
    backend: Backend,
    tokenizer: Any,
    *,
    max_steps: int | None = None,
) -> EpisodeRunner:
    """The runner of ``cfg`` (for ``Agent-v0``, :class:`agentrl.gateway.runner.AgentRunner`, the
    same interface: the user's program plays each episode through the gateway): prompts from ``rollout.prompt``, responses in the action format the
    credit module asks for (else ``rollout.action``'s; its prompt hint, if any, replaces
    ``rollout.prompt.response_hint``; ``rollout.action_format`` selects the tag or the tool-call
    format, ``rollout.tool_syntax`` the call syntax), the token cap, sampling truncation and constrained decoding
    of ``rollout``, and the step cap ``env.max_steps`` (or ``max_steps``)."""
    r = cfg.rollout
    _, hook = format_hook(cfg.credit.name, r.action_format)
    prompt = asdict(r.prompt)
    if hook.prompt_hint is not None:
        prompt["response_hint"] = hook.prompt_hint
    settings = RunnerSettings(
        max_steps or cfg.env.max_steps, r.max_new_tokens, r.top_p, r.top_k, r.constrained
    )
    if cfg.env.id.split("/")[-1] == AGENT_ENV:  # the user's program plays: through the gateway
        from ..gateway.runner import AgentRunner  # the serve extra (starlette, uvicorn)

        syntax = resolve_tool_syntax(r.tool_syntax, getattr(tokenizer, "chat_template", None))
        return AgentRunner(pool, backend, tokenizer, settings, syntax=syntax)
    builder = PromptBuilder(tokenizer, PromptConfig(**prompt))
    return EpisodeRunner(pool, backend, builder, action_format(cfg, tokenizer), tokenizer, settings)


def action_format(cfg: TrainConfig, tokenizer: Any) -> ActionFormat:
    """The action format the runner of ``cfg`` writes and parses responses in (the credit
    module's own, else ``rollout.action_format``'s, in ``rollout.tool_syntax``)."""
    r = cfg.rollout
    _, hook = format_hook(cfg.credit.name, r.action_format)
    chat_template = getattr(tokenizer, "chat_template", None)
    action = {**asdict(r.action), "tool_syntax": resolve_tool_syntax(r.tool_syntax, chat_template)}
    return hook.build(action)
