"""Who plays the other seats of a training game (``rollout.opponents``), and the opponent pool.

``rollout.opponents`` maps opponents to weights, e.g. ``{self: 0.5, pool: 0.3, random: 0.1,
"mcts:10": 0.1}``. Each training game (task group: its ``group_size`` rollouts alike) draws one
from ``(seed, iteration, group)`` (:func:`draw_opponents`):

- ``self``: the policy plays every seat (self-play), every seat trained;
- a bot spec of the env (``random``, ``mcts:N``): the env plays the other seats with its own bot
  (``reset(options={"opponent": spec})``), as ``env.kwargs.opponent`` does;
- ``pool``: a frozen earlier policy from :class:`OpponentPool` plays the other seats through the
  episode loop (:class:`PoolPolicy`); the env plays no seat itself. The learner plays seat
  ``seed % players``; the other agents' steps are recorded (``EpisodeResult.frozen``) but never
  trained, so credit groups stay per role. Which snapshot: one of the newest
  ``rollout.opponent_pool.size`` taken at or before the version the game samples with, drawn
  with the game. An empty pool (an asynchronous run's first batches) plays the game as ``self``.

The pool snapshots the policy's trainable tensors (with LoRA the adapters) every
``rollout.opponent_pool.every`` versions, the initial policy (version 0) included, and keeps a
bounded number; one frozen copy of the model (no gradient, ``eval()``) loads the snapshot an
episode needs before it samples, on a transformers engine of its own (:class:`HFBackend`),
whatever ``rollout.backend`` the learner's seats use.
"""

from __future__ import annotations

import copy
import dataclasses
import threading
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np
import torch

from ..backends.hf import HFBackend
from ..episodes import Episode, Move
from ..pool import ResetSpec
from .loop import ModelPolicy
from .runner import chunk_seed

__all__ = ["POOL", "SELF", "OpponentPool", "PoolPolicy", "draw_opponents"]

SELF, POOL = "self", "pool"


def draw_opponents(
    resets: Sequence[ResetSpec], mix: Mapping[str, float], seed: int, it: int, upto: int
) -> list[ResetSpec]:
    """``resets`` with each group's opponent drawn from ``mix`` (from ``(seed, it, group)``):
    the env's option for a bot or ``self``; for ``pool``, ``self`` in the env plus the snapshot
    draw for :class:`PoolPolicy` (snapshots up to version ``upto``)."""
    names = list(mix)
    p = np.asarray([float(mix[k]) for k in names])
    p = p / p.sum()
    out, chosen = [], {}
    for spec in resets:
        if spec.group not in chosen:
            rng = np.random.default_rng([int(seed), int(it), 5, int(spec.group)])
            chosen[spec.group] = (names[int(rng.choice(len(names), p=p))], float(rng.random()))
        name, u = chosen[spec.group]
        options = {**(spec.options or {}), "opponent": SELF if name == POOL else name}
        pool = {"upto": int(upto), "draw": u} if name == POOL else None
        out.append(dataclasses.replace(spec, options=options, opponent=pool))
    return out


class OpponentPool:
    """Frozen snapshots of the policy, taken every ``every`` versions, the newest ``size`` used
    (``extra`` more kept: an asynchronous run's games sample a few versions back); one frozen
    copy of ``model`` plays them on its own transformers engine."""

    def __init__(
        self,
        model: torch.nn.Module,
        tokenizer: Any,
        *,
        every: int,
        size: int,
        extra: int = 0,
        max_batch_size: int = 256,
        max_batch_tokens: int | None = None,
        seed: int = 0,
    ):
        if every < 1 or size < 1 or extra < 0:
            raise ValueError(f"opponent pool: every={every}, size={size} must be >= 1")
        self.every, self.size, self.keep = int(every), int(size), int(size) + int(extra)
        self.model = model
        self._members: dict[int, dict[str, torch.Tensor]] = {}
        self._lock = threading.Lock()
        self._loaded: int | None = None
        self.replica = copy.deepcopy(model).eval().requires_grad_(False)
        self._names = [n for n, p in model.named_parameters() if p.requires_grad]
        self.backend = HFBackend(
            self.replica,
            pad_token_id=tokenizer.pad_token_id,
            max_batch_size=max_batch_size,
            seed=seed,
            max_batch_tokens=max_batch_tokens,
        )

    @torch.no_grad()
    def offer(self, version: int, weights: Mapping[str, torch.Tensor] | None = None) -> bool:
        """Snapshot version ``version`` if it is due (a multiple of ``every``): ``weights`` (a
        copy already made, e.g. the asynchronous producer's) or the model's trainable tensors.
        Whether it was taken."""
        if version % self.every:
            return False
        if weights is None:
            own = dict(self.model.named_parameters())
            weights = {n: own[n].detach().clone() for n in self._names}
        elif set(weights) != set(self._names):
            raise ValueError(
                f"opponent pool: version {version} holds other tensors than the policy's"
            )
        with self._lock:
            self._members[int(version)] = dict(weights)
            for v in sorted(self._members)[: -self.keep]:
                del self._members[v]
                if self._loaded == v:
                    self._loaded = None
        return True

    def versions(self) -> list[int]:
        """The versions held, oldest first."""
        with self._lock:
            return sorted(self._members)

    def members(self, upto: int) -> list[int]:
        """The versions a game sampling with version ``upto`` may meet: the newest ``size``
        taken at or before it."""
        return [v for v in self.versions() if v <= upto][-self.size :]

    @torch.no_grad()
    def load(self, version: int) -> None:
        """Put snapshot ``version`` into the frozen copy (nothing when it holds it already)."""
        if self._loaded == version:
            return
        with self._lock:
            weights = self._members[version]
        own = dict(self.replica.named_parameters())
        for name, w in weights.items():
            own[name].copy_(w)
        self._loaded = version

    def wrap(self, policy: ModelPolicy) -> PoolPolicy:
        """The episode loop's policy for a chunk: ``policy`` for the learner's seats, the frozen
        copy (same prompt, format and constraints; its own sampling seed) for the others."""
        sampling = policy.sampling
        if sampling.seed is not None:
            sampling = dataclasses.replace(sampling, seed=chunk_seed(int(sampling.seed), 5))
        frozen = ModelPolicy(
            self.backend,
            policy.builder,
            policy.fmt,
            sampling,
            constrained=policy.constrained,
            stats=policy.stats,
        )
        return PoolPolicy(policy, frozen, self)


class PoolPolicy:
    """The learner's policy on its seats, a pool snapshot on the other seats of ``pool`` games
    (:class:`OpponentPool`); each step the live episodes are split, each side answers its share
    in one engine call (one per snapshot in use), and the moves come back in order."""

    def __init__(self, learner: ModelPolicy, frozen: ModelPolicy, pool: OpponentPool):
        self.learner, self.frozen, self.pool = learner, frozen, pool
        self._version: dict[int, int] = {}  # trajectory -> the snapshot its opponent plays

    def start(self, episodes: Sequence[Episode]) -> None:
        self.learner.start(episodes)
        for ep in episodes:
            draw = getattr(ep.task, "opponent", None)
            if not draw:
                continue
            agents = ep.info.get("agents")
            if not isinstance(agents, list) or "agent" not in ep.info:
                raise ValueError(
                    f"rollout.opponents: pool needs a multi-agent env (its info names the agents); "
                    f"task {ep.result.task_id!r} is single-agent"
                )
            members = self.pool.members(int(draw["upto"]))
            if not members:  # nothing taken yet: self-play
                continue
            version = members[min(int(draw["draw"] * len(members)), len(members) - 1)]
            seat = int(ep.task.seed or 0) % len(agents)
            ep.result.frozen = [a for i, a in enumerate(agents) if i != seat]
            ep.result.seats = [agents[seat]]
            ep.result.task_id = f"pool:{version}@{seat}#{ep.task.seed}"
            self._version[ep.result.traj] = version

    def act(self, episodes: Sequence[Episode], step: int, first_request: int | None) -> list[Move]:
        shares: dict[int | None, list[int]] = {}
        for i, ep in enumerate(episodes):
            frozen = ep.agent is not None and ep.agent in ep.result.frozen
            shares.setdefault(self._version[ep.result.traj] if frozen else None, []).append(i)
        if list(shares) == [None]:  # no opponent moves now: the learner's call as usual
            return list(self.learner.act(episodes, step, first_request))
        moves: list[Move | None] = [None] * len(episodes)
        for version, idx in shares.items():
            share = [episodes[i] for i in idx]
            if version is None:
                got = self.learner.act(share, step, None)
            else:
                self.pool.load(version)
                got = [
                    dataclasses.replace(m, policy_version=version)
                    for m in self.frozen.act(share, step, None)
                ]
            for i, m in zip(idx, got):
                moves[i] = m
        return moves  # type: ignore[return-value]
