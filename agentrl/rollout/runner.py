"""One episode runner for training and evaluation: a pool, a backend, a prompt and an action format.

Training rollouts, the trainer's held-out evaluation and ``python -m agentrl.evaluate agent=model``
all play episodes through :class:`EpisodeRunner`, so they chunk tasks, seed sampling and record
episodes the same way. :meth:`EpisodeRunner.play` splits the reset specs into chunks of
``len(pool)`` and plays each chunk with :func:`agentrl.rollout.loop.run_episodes`; the chunk that
starts at index ``start`` samples with the seed ``chunk_seed(seed, start)``. Evaluation (both
paths) passes ``seed=eval_seed(run_seed)``.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..backends.base import Backend, SamplingParams
from ..pool import EnvPool
from .activity import Activity, MeteredBackend
from .loop import EpisodeResult, ResetSpec, RolloutStats, run_episodes
from .parse import ActionFormat
from .prompt import PromptBuilder

__all__ = ["EVAL_STREAM", "EpisodeRunner", "RunnerSettings", "chunk_seed", "eval_seed"]

#: The seed stream of held-out evaluation: ``eval_seed(seed) == chunk_seed(seed, EVAL_STREAM)``
#: (training iteration ``it`` samples with ``chunk_seed(seed, it, 2)``; the two never meet).
EVAL_STREAM = 999_999


@dataclass(frozen=True)
class RunnerSettings:
    """What every episode of a runner shares: the step cap, the response token cap, the sampling
    truncation (``top_p``/``top_k``) and whether decoding is restricted to admissible actions."""

    max_steps: int
    max_new_tokens: int
    top_p: float = 1.0
    top_k: int = 0
    constrained: bool = False

    def __post_init__(self) -> None:
        if self.max_steps < 1:
            raise ValueError(f"max_steps must be >= 1, got {self.max_steps}")
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")


def chunk_seed(*parts: int) -> int:
    """A 31-bit seed from integer ``parts`` (numpy SeedSequence: well mixed, platform-independent)."""
    return int(np.random.SeedSequence([int(p) for p in parts]).generate_state(1)[0] & 0x7FFFFFFF)


def eval_seed(seed: int) -> int:
    """The sampling seed of a held-out evaluation of a run seeded with ``seed`` (the trainer's
    evaluation and ``agentrl.evaluate agent=model`` with the same ``seed`` use it alike)."""
    return chunk_seed(seed, EVAL_STREAM)


class EpisodeRunner:
    """Plays lists of reset specs on ``pool`` with ``backend``; owns both (:meth:`close`)."""

    def __init__(
        self,
        pool: EnvPool,
        backend: Backend,
        builder: PromptBuilder,
        fmt: ActionFormat,
        tokenizer: Any,
        settings: RunnerSettings,
    ):
        self.pool, self.backend, self.builder, self.fmt = pool, backend, builder, fmt
        self.tokenizer, self.settings = tokenizer, settings
        #: live counts of what :meth:`play` generates and finishes (the progress line)
        self.activity: Activity | None = None
        #: frozen earlier policies for the other seats of pool games (``rollout.opponents``;
        #: :class:`agentrl.rollout.opponents.OpponentPool`), or ``None``
        self.opponents: Any = None

    def sampling(self, temperature: float, seed: int | None) -> SamplingParams:
        """The sampling parameters of one chunk (stop at the tokenizer's end-of-sequence)."""
        s = self.settings
        return SamplingParams(
            max_new_tokens=int(s.max_new_tokens),
            temperature=float(temperature),
            top_p=float(s.top_p),
            top_k=int(s.top_k),
            stop_token_ids=(int(self.tokenizer.eos_token_id),),
            seed=seed,
        )

    def play(
        self,
        resets: Sequence[ResetSpec],
        *,
        temperature: float,
        seed: int,
        traj_offset: int = 0,
        stats: RolloutStats | None = None,
        on_chunk: Callable[[list[EpisodeResult]], None] | None = None,
        step_sync: Callable[[int], tuple[int, bool]] | None = None,
        seed_start: int = 0,
        on_episode: Callable[[int, EpisodeResult], None] | None = None,
    ) -> list[EpisodeResult]:
        """One episode per reset spec, in order, ``len(pool)`` at a time. The chunk starting at
        index ``start`` samples with ``chunk_seed(seed, seed_start + start)`` and numbers its
        trajectories from ``traj_offset + start``; ``on_chunk`` sees each chunk's episodes as soon
        as they end, ``on_episode(index, result)`` each episode as it ends (``index`` in
        ``resets``: an evaluation stopped by an error keeps what had finished); ``step_sync`` is
        :func:`~agentrl.rollout.loop.run_episodes`'s (data-parallel runs: a rank with no resets
        still plays one empty chunk, answering every step)."""
        size = len(self.pool)
        episodes: list[EpisodeResult] = []
        n = len(resets) if resets or step_sync is None else 1  # the empty chunk of a lockstep
        backend, live = self.backend, self.activity
        if live is not None:  # count responses, tokens and finished episodes as they come
            backend = MeteredBackend(backend, live)
            told = on_episode
            on_episode = lambda k, ep: (live.episode_done(), told and told(k, ep))  # noqa: E731
        for start in range(0, n, size):
            chunk = run_episodes(
                self.pool,
                backend,
                self.builder,
                self.fmt,
                resets[start : start + size],
                self.sampling(temperature, chunk_seed(seed, seed_start + start)),
                max_steps=int(self.settings.max_steps),
                constrained=bool(self.settings.constrained),
                traj_offset=traj_offset + start,
                stats=stats,
                step_sync=step_sync,
                on_episode=None
                if on_episode is None
                else (lambda k, ep, start=start: on_episode(start + k, ep)),
                opponents=self.opponents,
            )
            episodes += chunk
            if on_chunk is not None:
                on_chunk(chunk)
        return episodes

    def close(self) -> None:
        """Close the env pool and the backend."""
        self.pool.close()
        self.backend.close()
