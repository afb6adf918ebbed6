"""The generation interface every rollout backend implements (Hugging Face, vLLM).

Token in, token out: a backend receives prompt token ids and returns the sampled response token
ids with the log-probability of each sampled token under the distribution it was sampled from.
Text is never re-tokenised between the engine and the learner.

Constrained decoding: ``allowed[i]``, when given, lists the token sequences request ``i`` may
produce (for example each admissible action wrapped in the response template, tokenised, with
the stop token at the end). At every position the backend samples from the model's next-token
distribution renormalised over the tokens that keep the response a prefix of an allowed sequence
(a trie), and reports that renormalised log-prob. The learner applies the same trie when it
recomputes log-probs, so the PPO ratio compares like with like.

Conversations (the seam that engines of several servers and the gateway share): request ``i``
may name its conversation in ``SamplingParams.sessions[i]`` (an episode of the rollout loop, a
gateway session). An engine of one process ignores it; an engine that spreads requests over
several servers (:mod:`agentrl.backends.fleet`) keeps a conversation's calls on one server, whose
prefix cache holds its growing context. Every :class:`Generation` reports the version of the
weights that sampled it in ``extra["policy_version"]`` where the engine knows it (the producer
of asynchronous rollouts and the fleet set it; the trainer's staleness bound reads it).

Streaming (what the gateway's streamed replies use): an engine whose ``streams`` is true takes
``on_tokens`` in :meth:`Backend.generate`, a :data:`TokenSink` it calls from its own thread as
request ``i``'s tokens are sampled, with the new ones in order (together they are the
Generation's ``token_ids``). Wrappers pass it through; other engines have no ``streams`` and
return whole responses only.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal, Protocol, runtime_checkable

__all__ = ["Backend", "BackendError", "Generation", "Handover", "SamplingParams", "TokenSink"]

#: ``on_tokens(i, ids)``: request ``i`` has sampled ``ids`` since the last call (see above).
TokenSink = Callable[[int, Sequence[int]], None]


def guarded(sink: TokenSink) -> TokenSink:
    """``sink`` until it fails once (its reader gone), then nothing: an engine's sample never
    fails for its stream."""
    broken: list[bool] = []

    def call(i: int, ids: Sequence[int]) -> None:
        if not broken:
            try:
                sink(i, list(ids))
            except Exception:  # noqa: BLE001 - the sample matters more than its stream
                broken.append(True)

    return call


class Handover:
    """One call's stream: ``offer(i, tokens)`` with request ``i``'s tokens so far hands the
    ones past those already given to ``sink`` (guarded: a sink that fails is not called
    again). A request that offers the same tokens again (a replay) hands over nothing new."""

    def __init__(self, sink: TokenSink, n: int):
        self.sink, self.sent = guarded(sink), [0] * n

    def offer(self, i: int, tokens: Sequence[int]) -> None:
        if len(tokens) > self.sent[i]:
            self.sink(i, [int(t) for t in tokens[self.sent[i] :]])
            self.sent[i] = len(tokens)


class BackendError(RuntimeError):
    """An engine cannot go on (a server gone, one serving other weights): its message is one
    line naming the cause, which the trainer prints as it is."""


@dataclass(frozen=True)
class SamplingParams:
    """How to sample. ``temperature == 0`` means greedy."""

    max_new_tokens: int = 32
    temperature: float = 1.0
    top_p: float = 1.0
    top_k: int = 0  # 0: off
    stop_token_ids: tuple[int, ...] = ()
    seed: int | None = None  # request i of a call uses a generator seeded from (seed, i)
    # With ``request_ids``, request i uses (seed, request_ids[i]) instead: a rank playing part of
    # a batch numbers its requests as one process playing the whole batch would (torchrun).
    request_ids: tuple[int, ...] | None = None
    # sessions[i]: the conversation request i belongs to (an episode, a gateway session); an
    # engine of several servers keeps one conversation on one server; others ignore it.
    sessions: tuple[str, ...] | None = None

    def __post_init__(self) -> None:
        if self.max_new_tokens < 1:
            raise ValueError(f"max_new_tokens must be >= 1, got {self.max_new_tokens}")
        if self.temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {self.temperature}")
        if not 0 < self.top_p <= 1:
            raise ValueError(f"top_p must lie in (0, 1], got {self.top_p}")
        if self.sessions is not None and not all(isinstance(x, str) for x in self.sessions):
            raise ValueError("sessions must be a tuple of str")


@dataclass
class Generation:
    """One sampled response."""

    token_ids: list[int]
    logprobs: list[float]  # one per token in token_ids
    finish_reason: Literal["stop", "length"] = "stop"
    extra: dict[str, Any] = field(default_factory=dict)


@runtime_checkable
class Backend(Protocol):
    """A generation engine."""

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
    ) -> list[Generation]:
        """Sample one response per prompt."""
        ...

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load new policy weights (after a learner update)."""
        ...

    def close(self) -> None: ...
