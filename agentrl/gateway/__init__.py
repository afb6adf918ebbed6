"""An OpenAI-compatible gateway in front of the run's policy, recording the exact tokens of every
call per session, and the rollout source that trains agent programs through it (``env=agent``).

- :mod:`~agentrl.gateway.chat`: requests to prompt ids (the chat template), sampled ids to replies
  (the tool-call format's reader);
- :mod:`~agentrl.gateway.sessions`: what is recorded, and the prefix rule;
- :mod:`~agentrl.gateway.engine`: one thread batching the sessions' requests into the backend;
- :mod:`~agentrl.gateway.server`: the HTTP server (:class:`Gateway`);
- :mod:`~agentrl.gateway.runner`: :class:`AgentRunner`, episodes played by a user's program.

Needs the ``serve`` extra (starlette, uvicorn). See docs/agents.md.
"""

from .runner import AgentRunner
from .server import SESSION_HEADER, Gateway
from .sessions import CallRecord, Outcome, Session

__all__ = ["SESSION_HEADER", "AgentRunner", "CallRecord", "Gateway", "Outcome", "Session"]
