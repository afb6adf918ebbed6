"""The PPO learner: sequences, forward pass, losses, and the update loop."""

from .forward import ForwardOut, response_forward
from .learner import Learner, LearnerConfig
from .losses import aggregate, kl_penalty, ppo_clip_loss, value_loss
from .schedule import LRSchedule
from .sequences import Collated, StepSequence, collate
from .update import NonFiniteError, token_advantages

__all__ = [
    "Collated",
    "ForwardOut",
    "Learner",
    "LRSchedule",
    "LearnerConfig",
    "NonFiniteError",
    "StepSequence",
    "aggregate",
    "collate",
    "kl_penalty",
    "ppo_clip_loss",
    "response_forward",
    "token_advantages",
    "value_loss",
]
