"""OpenEnv both ways (extra ``openenv``: ``openenv-core``, pinned; docs/envs/openenv.md).

- ``agentrl/OpenEnv-v0`` (:class:`OpenEnvEnv`): an environment served in OpenEnv's protocol,
  reached through OpenEnv's own client, as an agentrl text env: ``envs.make("OpenEnv-v0",
  url="http://127.0.0.1:8700")``.
- :func:`create_openenv_app` and ``python -m agentrl.envs.openenv serve ENV``: any registered
  agentrl env served in OpenEnv's protocol, for OpenEnv users' trainers.
"""

from .client import OpenEnvEnv, OpenEnvServerError
from .server import (
    AgentrlAction,
    AgentrlEnvironment,
    AgentrlObservation,
    AgentrlState,
    create_openenv_app,
)

__all__ = [
    "AgentrlAction",
    "AgentrlEnvironment",
    "AgentrlObservation",
    "AgentrlState",
    "OpenEnvEnv",
    "OpenEnvServerError",
    "create_openenv_app",
]
