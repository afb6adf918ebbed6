"""Trajectory traces: episodes step by step, as JSON lines under a run's ``traces/`` folder.

One file per traced iteration (``train_000001.jsonl``) or evaluation (``eval_final.jsonl``): a
first line ``{"type": "meta", ...}`` (what the file is: run kind, iteration, phase, env, credit
module), then one line ``{"type": "episode", ...}`` per episode (a multi-agent episode in training:
one line per agent, as the step batch has it, with ``game``: the episode it is a view of), its
steps inside. JSON lines because they stream
(a file is written episode by episode, and a run cut short leaves whole lines), need no
dependency, read with ``head``/``jq``/``pandas.read_json(lines=True)``, and are what the viewer
(``python -m agentrl.view``) and the trackers load; ``trainer.traces.gzip`` compresses them.

A step holds the observation, the prompt (token ids and text), the response (ids and text), the
parsed action, whether it was valid and why not, the reward and ``state_key``; training steps add
the credit module's advantage and its groups (:func:`agentrl.credit.step_groups`), and ``tokens``:
per response token its text, the advantage the loss used, the engine's log-prob, the learner's
log-prob, π_old, the ratio, whether it was clipped and whether it was in the loss, and the policy
version of the weights that sampled it. Texts are cut to their last ``max_chars`` characters.
This module imports no torch: ``agentrl.evaluate``'s random, expert and endpoint agents trace
their episodes with it too (their steps have no token ids).
"""

from __future__ import annotations

import gzip
import json
import math
from collections.abc import Callable, Iterable, Mapping, Sequence
from pathlib import Path
from typing import IO, Any

__all__ = [
    "TRACE_VERSION",
    "TraceFile",
    "episode_line",
    "read_trace",
    "step_line",
    "trace_files",
]

TRACE_VERSION = 1
Decode = Callable[[Sequence[int]], str]


def plain(x: Any) -> Any:
    """A JSON value for ``x``: numbers rounded to 6 decimals (non-finite: ``None``), numpy
    scalars and arrays unwrapped, anything else unknown as its ``str``."""
    if x is None or isinstance(x, bool | str):
        return x
    if isinstance(x, int):
        return x
    if isinstance(x, float):
        return round(x, 6) if math.isfinite(x) else None
    if hasattr(x, "tolist"):  # numpy scalars and arrays
        return plain(x.tolist())
    if isinstance(x, Mapping):
        return {str(k): plain(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [plain(v) for v in x]
    return str(x)


def _cut(text: Any, max_chars: int) -> str:
    s = "" if text is None else str(text)
    return s if len(s) <= max_chars else "…" + s[-max_chars:]


def step_line(s: Any, t: int, *, decode: Decode | None, max_chars: int) -> dict[str, Any]:
    """One step of an :class:`agentrl.episodes.EpisodeResult` (a ``StepRecord``, duck-typed)."""
    prompt_ids = list(s.prompt_ids)
    response_ids = list(s.response_ids)
    out: dict[str, Any] = {
        "t": t,
        "agent": s.agent,
        "observation": _cut(s.observation, max_chars),
        "prompt_ids": prompt_ids,
        "prompt_text": _cut(decode(prompt_ids), max_chars) if decode and prompt_ids else "",
        "response_ids": response_ids,
        "response_text": _cut(s.response, max_chars),
        "action": s.action,
        "valid": bool(s.valid),
        "why_invalid": "" if s.valid else (s.parse_error or "the env refused the action"),
        "finish_reason": s.finish_reason,
        "reward": plain(float(s.reward)),
        "state_key": plain(s.state_key),
        "next_state_key": plain(s.next_state_key),
        "milestones_new": int(s.milestones_new),
    }
    if response_ids:
        out["tokens"] = {
            "text": [decode([i]) for i in response_ids]
            if decode
            else [str(i) for i in response_ids],
            "engine_logprob": plain(list(s.logprobs)),
            "version": [int(v) for v in s.versions()],
        }
    return out


def episode_line(
    ep: Any,
    env: str,
    *,
    decode: Decode | None = None,
    max_chars: int = 4000,
    steps: list[dict[str, Any]] | None = None,
) -> dict[str, Any]:
    """An episode (an ``EpisodeResult`` or one agent's view of it) with its steps."""
    if steps is None:
        steps = [
            step_line(s, t, decode=decode, max_chars=max_chars) for t, s in enumerate(ep.steps)
        ]
    return {
        "type": "episode",
        "env": env,
        "task_id": str(ep.task_id),
        "category": str(ep.category or "default"),
        "group": int(ep.group),
        "traj": int(ep.traj),
        "agent": ep.agent,
        "agents": sorted({s["agent"] for s in steps if s.get("agent")}),
        "seed": ep.seed,
        "won": bool(ep.won),
        "score": plain(float(ep.score)),
        "return": plain(float(sum(s.reward for s in ep.steps))),
        "outcome": "won" if ep.won else ("error" if ep.error else "lost"),
        "invalid_actions": sum(not s.valid for s in ep.steps),
        "terminated": bool(ep.terminated),
        "truncated": bool(ep.truncated),
        "error": ep.error,
        "steps": steps,
    }


class TraceFile:
    """A JSON-lines trace file written line by line (``gzip``: ``.jsonl.gz``); a context manager."""

    def __init__(self, folder: Path, name: str, meta: Mapping[str, Any], gzip_: bool = False):
        folder.mkdir(parents=True, exist_ok=True)
        self.path = folder / (f"{name}.jsonl.gz" if gzip_ else f"{name}.jsonl")
        if gzip_:  # closed by close() / the with block
            self._f: IO[str] = gzip.open(self.path, "wt", encoding="utf-8", compresslevel=5)  # noqa: SIM115
        else:
            self._f = open(self.path, "w", encoding="utf-8")  # noqa: SIM115
        self.episodes = 0
        self.steps = 0
        self.write({"type": "meta", "version": TRACE_VERSION, **plain(dict(meta))})

    def write(self, line: Mapping[str, Any]) -> None:
        self._f.write(json.dumps(line, ensure_ascii=False, separators=(",", ":")) + "\n")
        if line.get("type") == "episode":
            self.episodes += 1
            self.steps += len(line.get("steps", ()))

    def close(self) -> None:
        self._f.close()

    def __enter__(self) -> TraceFile:
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()


def trace_files(run: Path) -> list[Path]:
    """The trace files of a run folder (its ``traces/``), of a ``traces`` folder, or the one file
    given; by name. None: an empty list."""
    if run.is_file():
        return [run]
    folder = run / "traces" if (run / "traces").is_dir() else run
    if folder.name != "traces" or not folder.is_dir():
        return []
    return sorted([*folder.glob("*.jsonl"), *folder.glob("*.jsonl.gz")])


def read_trace(path: Path) -> tuple[dict[str, Any], list[dict[str, Any]]]:
    """``(meta, episodes)`` of one trace file; a truncated last line (a run cut short) is left
    out, any other unreadable line raises ``ValueError`` naming the file and line."""
    opener = gzip.open if path.name.endswith(".gz") else open
    meta: dict[str, Any] = {}
    episodes: list[dict[str, Any]] = []
    with opener(path, "rt", encoding="utf-8") as f:
        lines: Iterable[str] = f.read().splitlines()
    lines = list(lines)
    for k, text in enumerate(lines):
        if not text.strip():
            continue
        try:
            line = json.loads(text)
        except json.JSONDecodeError as exc:
            if k == len(lines) - 1:
                break
            raise ValueError(f"{path}: line {k + 1} is not JSON ({exc.msg})") from None
        if line.get("type") == "meta":
            meta = line
        elif line.get("type") == "episode":
            episodes.append(line)
    return meta, episodes
