"""OpenSpiel games as multi-agent text envs, with OpenSpiel's bots as opponents (``open_spiel``,
the ``games`` extra)."""

from .env import GAMES, OpenSpielEnv, agent_name

__all__ = ["GAMES", "OpenSpielEnv", "agent_name"]
