"""Multi-turn rollouts: prompts, action parsing, the model policy of the episode loop, the episode
runner, step-batch assembly."""

from .batch import to_step_batch
from .loop import EpisodeResult, ModelPolicy, ResetSpec, RolloutStats, StepRecord, run_episodes
from .parse import ActionFormat, ParsedAction, action_token_counter
from .prompt import PromptBuilder, PromptConfig, Turn
from .runner import EpisodeRunner, RunnerSettings, chunk_seed, eval_seed

__all__ = [
    "ActionFormat",
    "EpisodeResult",
    "EpisodeRunner",
    "ModelPolicy",
    "ParsedAction",
    "PromptBuilder",
    "PromptConfig",
    "ResetSpec",
    "RolloutStats",
    "RunnerSettings",
    "StepRecord",
    "Turn",
    "action_token_counter",
    "chunk_seed",
    "eval_seed",
    "run_episodes",
    "to_step_batch",
]
