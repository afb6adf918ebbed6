"""agentrl: reinforcement learning for LLM agents in multi-turn text environments.

The package imports no torch at the top level; training pieces load it on use.
"""

__version__ = "0.1.0"
