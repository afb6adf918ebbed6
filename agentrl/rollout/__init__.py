"""Multi-turn rollouts: prompts, action parsing, the episode loop, and step-batch assembly."""

from .batch import to_step_batch
from .loop import EpisodeResult, ResetSpec, RolloutStats, StepRecord, run_episodes
from .parse import ActionFormat, ParsedAction
from .prompt import PromptBuilder, PromptConfig, Turn

__all__ = [
    "ActionFormat",
    "EpisodeResult",
    "ParsedAction",
    "PromptBuilder",
    "PromptConfig",
    "ResetSpec",
    "RolloutStats",
    "StepRecord",
    "Turn",
    "run_episodes",
    "to_step_batch",
]
