"""agentrl environments: Gymnasium text envs with one info contract (see ``agentrl.envs.base``).

Importing this package registers the built-in envs under the ``agentrl/`` namespace.
"""

from .adapter import DiscreteTextEnv, make_frozen_lake
from .base import INFO_KEYS, OPTIONAL_INFO_KEYS, EnvInfo, FreeText, TextEnv, make_info
from .registry import list_envs, load_plugins, make, register, register_builtins
from .tools import tool, tool_info

register_builtins()

__all__ = [
    "INFO_KEYS",
    "OPTIONAL_INFO_KEYS",
    "DiscreteTextEnv",
    "EnvInfo",
    "FreeText",
    "TextEnv",
    "list_envs",
    "load_plugins",
    "make",
    "make_frozen_lake",
    "make_info",
    "register",
    "tool",
    "tool_info",
]
