"""What the gateway records: sessions, their calls, their rewards, and the prefix rule.

A session is one run of an agent program (one episode). Each ``/v1/chat/completions`` call it
makes is recorded as a :class:`CallRecord`: the exact prompt ids the engine read, the response
ids it sampled, their log-probs, the weights' version, the parsed tool calls, the latency.

The prefix rule (token fidelity): a call whose prompt starts with the previous call's prompt and
response ids, token for token, *extends* it: the two are steps of one growing context, as
in-process episodes are. The gateway builds such prompts itself whenever it can: when the
program sends back the previous reply unchanged (same text, same calls) followed by new
messages, the prompt is the recorded ids plus the template's rendering of the new messages
only, so a sampled response is never re-tokenised. When the program rewrote its history
(summarised, dropped a ``<think>`` block, re-ordered messages), the call is rendered afresh and
trains on its own exact prompt; if it does not extend the previous call, ``prefix_breaks``
counts it.
"""

from __future__ import annotations

import threading
from collections.abc import Hashable, Sequence
from dataclasses import dataclass, field
from typing import Any

from .chat import Message, Reply

__all__ = ["CallRecord", "Outcome", "Session", "SessionError", "Sessions"]


class SessionError(KeyError):
    """An unknown or closed session (HTTP 401 / 409)."""

    def __init__(self, message: str, status: int):
        super().__init__(message)
        self.message, self.status = message, status

    def __str__(self) -> str:
        return self.message


@dataclass
class CallRecord:
    """One chat call of a session, as the engine saw it."""

    index: int
    prompt_ids: list[int]
    response_ids: list[int]
    logprobs: list[float]
    policy_version: int
    engine_finish: str  # the engine's: stop or length
    text: str  # the sampled response, decoded
    reply: Reply
    messages: tuple[Message, ...]
    tools: tuple[dict[str, Any], ...]
    extends: bool  # the prompt extends the previous call's prompt + response
    reused: bool  # the prompt was built from the recorded ids of an earlier call
    latency_s: float
    request: dict[str, Any] = field(default_factory=dict)  # the sampling the program asked for
    sampling: dict[str, Any] = field(default_factory=dict)  # what the engine got (seed, request id)
    #: per response position, the token ids sampling was restricted to (``tool_choice`` enforced
    #: over finite schemas, :mod:`agentrl.gateway.strict`); ``None``: the full vocabulary
    allowed: list[list[int]] | None = None

    def to_json(self) -> dict[str, Any]:
        return {
            "index": self.index,
            "prompt_ids": self.prompt_ids,
            "response_ids": self.response_ids,
            "logprobs": self.logprobs,
            "policy_version": self.policy_version,
            "finish_reason": self.reply.finish_reason,
            "text": self.text,
            "message": self.reply.message(),
            "parse_error": self.reply.parse_error,
            "extends": self.extends,
            "reused": self.reused,
            "latency_s": self.latency_s,
            "request": self.request,
            "sampling": self.sampling,
            "allowed": self.allowed,
        }


@dataclass
class Outcome:
    """A session's reward: the episode's, optional per-call rewards and state keys."""

    reward: float
    step_rewards: list[float] | None = None
    state_keys: list[Hashable] | None = None
    success: bool | None = None


def outcome_of(value: Any) -> Outcome:
    """An :class:`Outcome` from a number or a mapping (``reward``, optional ``step_rewards``,
    ``state_keys``, ``success``); ``ValueError`` says what is wrong."""
    if isinstance(value, Outcome):
        return value
    if isinstance(value, bool) or not isinstance(value, int | float | dict):
        raise ValueError(f"a reward is a number or an object with 'reward', got {value!r:.60}")
    if not isinstance(value, dict):
        value = {"reward": value}
    extra = set(value) - {"reward", "step_rewards", "state_keys", "success"}
    if extra:
        raise ValueError(f"unknown reward key(s): {', '.join(sorted(map(str, extra)))}")
    r = value.get("reward")
    if isinstance(r, bool) or not isinstance(r, int | float) or r != r or abs(r) == float("inf"):
        raise ValueError(f"reward must be a finite number, got {r!r:.60}")
    steps = value.get("step_rewards")
    if steps is not None and (
        not isinstance(steps, list)
        or not all(isinstance(x, int | float) and not isinstance(x, bool) for x in steps)
    ):
        raise ValueError("step_rewards must be a list of numbers, one per call")
    keys = value.get("state_keys")
    if keys is not None and (
        not isinstance(keys, list) or not all(isinstance(k, str) for k in keys)
    ):
        raise ValueError("state_keys must be a list of strings, one per call")
    success = value.get("success")
    if success is not None and not isinstance(success, bool):
        raise ValueError("success must be true or false")
    return Outcome(float(r), None if steps is None else [float(x) for x in steps], keys, success)


@dataclass
class Session:
    """One program run: its calls in order, its outcome, and what the trainer pinned."""

    name: str
    seed: int | None = None  # the sampling seed of its calls (request ids number them)
    temperature: float | None = None  # pinned by the trainer: the learner's ratio assumes it
    top_p: float | None = None
    max_tokens: int | None = None  # a cap on every call's response
    calls: list[CallRecord] = field(default_factory=list)
    outcome: Outcome | None = None
    closed: bool = False
    prefix_breaks: int = 0
    submitted: int = 0  # calls sent to the engine so far (numbers their request ids)
    lock: threading.Lock = field(default_factory=threading.Lock, repr=False)
    #: the latest call per dialogue it answered (its messages and its reply): :meth:`base`
    _by_dialogue: dict[tuple[Message, ...], CallRecord] = field(default_factory=dict, repr=False)

    def next_request(self) -> int:
        """The number of the call being submitted (parallel calls get different ones)."""
        with self.lock:
            self.submitted += 1
            return self.submitted - 1

    def base(self, messages: Sequence[Message], tools: Sequence[dict[str, Any]]):
        """The latest call this one continues (its messages, then its reply unchanged, then new
        non-assistant messages) and those new messages; ``None`` when there is none. Only the
        request's last assistant message can be that reply, so one look-up finds the call."""
        last = max((i for i, m in enumerate(messages) if m.role == "assistant"), default=-1)
        if last < 0 or last == len(messages) - 1:
            return None
        c = self._by_dialogue.get(tuple(messages[: last + 1]))
        if c is None or c.tools != tuple(tools):
            return None
        return c, list(messages[last + 1 :])

    def add(self, record: CallRecord) -> None:
        """Record a call (under :attr:`lock`), findable by :meth:`base` from its dialogue."""
        self.calls.append(record)
        self._by_dialogue[(*record.messages, record.reply.normalised())] = record

    def extends(self, prompt_ids: Sequence[int]) -> bool:
        """Whether ``prompt_ids`` starts with the last call's prompt + response ids."""
        if not self.calls:
            return True
        last = self.calls[-1]
        head = last.prompt_ids + last.response_ids
        return len(prompt_ids) >= len(head) and list(prompt_ids[: len(head)]) == head

    def to_json(self) -> dict[str, Any]:
        o = self.outcome
        return {
            "session": self.name,
            "closed": self.closed,
            "prefix_breaks": self.prefix_breaks,
            "reward": None if o is None else o.reward,
            "step_rewards": None if o is None else o.step_rewards,
            "state_keys": None if o is None else o.state_keys,
            "success": None if o is None else o.success,
            "calls": [c.to_json() for c in self.calls],
        }


class Sessions:
    """The gateway's sessions by name (thread-safe). ``open_sessions``: a call naming an unknown
    session opens it (the standalone gateway); else only sessions opened with :meth:`open` take
    calls (the trainer's, one per episode)."""

    def __init__(self, open_sessions: bool = True):
        self.open_sessions = open_sessions
        self._by_name: dict[str, Session] = {}
        self._lock = threading.Lock()
        self.prefix_breaks = 0

    def open(self, name: str, **pinned: Any) -> Session:
        with self._lock:
            if name in self._by_name and not self._by_name[name].closed:
                raise ValueError(f"session {name!r} is already open")
            s = self._by_name[name] = Session(name, **pinned)
            return s

    def get(self, name: str, *, create: bool = False) -> Session:
        with self._lock:
            s = self._by_name.get(name)
            if s is None and create and self.open_sessions:
                s = self._by_name[name] = Session(name)
        if s is None:
            raise SessionError(
                f"unknown session {name[:60]!r}: use the API key (or X-Session-Id) the trainer "
                "gave this episode",
                401,
            )
        if s.closed and create:
            raise SessionError(f"session {name[:60]!r} is closed (its episode has ended)", 409)
        return s

    def close(self, name: str) -> Session:
        """End a session (later calls get 409) and hand back its record."""
        with self._lock:
            s = self._by_name.pop(name)
        with s.lock:
            s.closed = True
        return s

    def all(self) -> list[Session]:
        with self._lock:
            return list(self._by_name.values())
