"""``env=agent``: episodes played by the user's own agent program through the gateway.

:class:`AgentRunner` has the episode runner's interface (:class:`agentrl.rollout.EpisodeRunner`:
``play`` reset specs, ``close``), so the trainer, its held-out evaluation, dynamic sampling and
the asynchronous producer use it unchanged; :func:`agentrl.methods.build_runner` builds it when
the env is ``Agent-v0``. Why a runner and not an env or a policy: an env is stepped by agentrl
and a policy answers agentrl's prompts, while here the program drives the dialogue and agentrl
only serves its calls; the runner is the seam that turns "reset specs in" into "episodes out".

Per chunk of reset specs (the env pool's width), the runner resets the ``Agent-v0`` envs (the
task each episode plays), opens one gateway session per episode (its API key; the run's
temperature, top-p and response cap pinned, so the learner's ratio holds), runs the program for
every episode at once (a Python callable in a thread, or a command in a subprocess) under a
per-episode timeout, and turns each session's calls into the episode's steps, one step per call:
the exact prompt ids, the sampled ids and the engine's log-probs. An episode whose program
raised, hung, never called or reported no reward is cut with the reason (``EpisodeResult.fault``;
the trainer leaves it out of credit and counts it), never the run.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import inspect
import json
import logging
import os
import shlex
import subprocess
import threading
import time
import weakref
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import openai

from ..backends.base import Backend
from ..config import ConfigError
from ..episodes import EpisodeResult, RolloutStats, StepRecord
from ..pool import EnvPool, ResetSpec
from ..rollout.runner import RunnerSettings, chunk_seed
from ..rollout.tools import ToolCallFormat
from .server import Gateway
from .sessions import Outcome, Session, outcome_of

__all__ = ["AgentRunner", "load_agent", "session_episode"]

PREFIX_BREAKS = "gateway/prefix_breaks"


def load_agent(spec: str) -> Callable[..., Any]:
    """The callable ``MODULE:FUNCTION`` names; ``ValueError`` in one line when it cannot."""
    module, _, name = spec.rpartition(":")
    try:
        if module.endswith(".py"):  # a script: loaded from its file
            path = Path(module).expanduser().resolve()
            found = importlib.util.spec_from_file_location(f"agentrl_agent_{path.stem}", path)
            if found is None or found.loader is None or not path.is_file():
                raise ImportError(f"no file {module}")
            mod = importlib.util.module_from_spec(found)
            found.loader.exec_module(mod)
        else:
            mod = importlib.import_module(module)
        fn = getattr(mod, name)
    except (ImportError, AttributeError, SyntaxError) as exc:
        raise ValueError(f"env.kwargs.agent={spec!r}: {exc}") from None
    if not callable(fn):
        raise ValueError(f"env.kwargs.agent={spec!r} is not callable")
    return fn


def _takes_client(fn: Callable[..., Any]) -> bool:
    """Whether ``fn`` is ``play(task, client)`` (two parameters) rather than
    ``play(base_url, api_key, task)`` (three)."""
    try:
        params = [
            p for p in inspect.signature(fn).parameters.values()
            if p.kind in (p.POSITIONAL_ONLY, p.POSITIONAL_OR_KEYWORD) and p.default is p.empty
        ]  # fmt: skip
    except (TypeError, ValueError):
        return False
    return len(params) == 2


def _key(prompt_ids: Sequence[int]) -> str:
    """A state key from a prompt's ids (same prompt, same state)."""
    return hashlib.sha1(json.dumps(list(prompt_ids)).encode()).hexdigest()[:16]


def session_episode(
    session: Session, outcome: Outcome, *, group: int, traj: int, task_id: str, category: str,
    seed: int | None,
) -> EpisodeResult:  # fmt: skip
    """The episode of a finished session: one step per call, in call order. The reward is on the
    last step (or ``step_rewards``, one per call); state keys are the program's ``state_keys``
    when it posted them, else the hash of the call's prompt ids."""
    calls = session.calls
    n = len(calls)
    rewards = outcome.step_rewards or [0.0] * (n - 1) + [outcome.reward]
    keys = outcome.state_keys or [_key(c.prompt_ids) for c in calls]
    if len(rewards) != n or len(keys) != n:
        raise ValueError(f"step_rewards and state_keys need one entry per call ({n} calls)")
    ep = EpisodeResult(group, traj, task_id, category, seed, terminated=True)
    for t, c in enumerate(calls):
        r = c.reply
        if r.calls:
            action = "; ".join(
                f"{x.name}({json.dumps(x.arguments, sort_keys=True)})" for x in r.calls
            )
        else:
            action = r.content or ""
        last = c.messages[-1] if c.messages else None
        ep.steps.append(
            StepRecord(
                prompt_ids=c.prompt_ids, response_ids=c.response_ids, logprobs=c.logprobs,
                allowed=c.allowed, response=c.text, action=None if r.parse_error else action,
                parse_error=r.parse_error, finish_reason=c.engine_finish,
                observation=last.content if last is not None else "", state_key=keys[t],
                reward=float(rewards[t]), valid=not r.parse_error, milestones_new=0,
                next_state_key=keys[t + 1] if t + 1 < n else "terminal",
                extras={"prefix_break": not c.extends}, policy_version=c.policy_version,
            )
        )  # fmt: skip
    ep.won = bool(outcome.success) if outcome.success is not None else outcome.reward > 0
    ep.score = min(1.0, max(0.0, float(outcome.reward)))
    return ep


class AgentRunner:
    """Plays reset specs of ``Agent-v0`` envs with the program they name (module docstring)."""

    def __init__(
        self,
        pool: EnvPool,
        backend: Backend,
        tokenizer: Any,
        settings: RunnerSettings,
        *,
        syntax: str,
    ):
        self.pool, self.tokenizer, self.settings = pool, tokenizer, settings
        self.fmt = ToolCallFormat(syntax=syntax)  # the reader the gateway uses
        self.activity = None
        self.gateway = Gateway(backend, tokenizer, open_sessions=False, syntax=syntax,
                               max_tokens=settings.max_new_tokens)  # fmt: skip
        self._backend = backend
        self.base_url = ""
        self._agents: dict[str, Callable[..., Any]] = {}
        self._http: Any = None  # the sessions' shared HTTP client (made on first use)
        self._lock = threading.Lock()

    @property
    def backend(self) -> Backend:
        return self._backend

    @backend.setter
    def backend(self, value: Backend) -> None:
        """A new engine view (the asynchronous producer's versioned one) serves the gateway."""
        self._backend = value
        self.gateway.engine.backend = value

    def __copy__(self) -> AgentRunner:
        """A runner on the same pool and engine with a gateway of its own (the asynchronous
        producer plays its groups through a copy); its gateway closes with it."""
        new = AgentRunner(self.pool, self._backend, self.tokenizer, self.settings,
                          syntax=self.fmt.syntax)  # fmt: skip
        new._agents, new.activity = self._agents, self.activity
        new._http = self._http_client()  # shared; this runner closes it
        weakref.finalize(new, new.gateway.close)
        return new

    def _url(self) -> str:
        if not self.base_url:
            for name in ("httpx", "httpx2"):  # the OpenAI client's line per request, at INFO
                logging.getLogger(name).setLevel(logging.WARNING)
            self.base_url = self.gateway.start()
        return self.base_url

    def play(
        self,
        resets: Sequence[ResetSpec],
        *,
        temperature: float,
        seed: int,
        traj_offset: int = 0,
        stats: RolloutStats | None = None,
        on_chunk: Callable[[list[EpisodeResult]], None] | None = None,
        step_sync: Any = None,
        seed_start: int = 0,
        on_episode: Callable[[int, EpisodeResult], None] | None = None,
    ) -> list[EpisodeResult]:
        """One episode per reset spec, in order, ``len(pool)`` at a time (as
        :meth:`agentrl.rollout.EpisodeRunner.play`)."""
        if step_sync is not None:
            raise ValueError("env=agent runs in one process (no torchrun)")
        size, out = len(self.pool), []
        for start in range(0, len(resets), size):
            part = list(resets[start : start + size])
            firsts = self.pool.reset(list(range(len(part))), [r.seed for r in part],
                                     [r.options for r in part])  # fmt: skip
            cseed = chunk_seed(seed, seed_start + start)
            eps = self._chunk(part, firsts, temperature, cseed, traj_offset + start, stats)
            for k, ep in enumerate(eps):
                if on_episode is not None:
                    on_episode(start + k, ep)
            out += eps
            if on_chunk is not None:
                on_chunk(eps)
        return out

    def _check(self, program: dict[str, Any]) -> None:
        """The program can run: named, and (a callable) importable; else one line."""
        if not program.get("agent") and not program.get("command"):
            raise ConfigError("invalid config: env=agent needs the program to run: "
                              "env.kwargs.agent=MODULE:FUNCTION (or FILE.py:FUNCTION) or "
                              "env.kwargs.command='...'")  # fmt: skip
        spec = program.get("agent")
        if spec and spec not in self._agents:
            try:
                self._agents[spec] = load_agent(spec)
            except ValueError as exc:
                raise ConfigError(f"invalid config: {exc}") from None

    def _chunk(self, part, firsts, temperature, cseed, traj0, stats) -> list[EpisodeResult]:
        for _, info in firsts:
            self._check(info["agent_program"])
        url, s = self._url(), self.settings
        names = [f"agentrl-{cseed:08x}-{traj0 + k}" for k in range(len(part))]
        for name in names:
            self.gateway.open_session(name, seed=cseed, temperature=float(temperature),
                                      top_p=float(s.top_p), max_tokens=int(s.max_new_tokens))  # fmt: skip
        t0 = time.perf_counter()
        Result = tuple[Outcome | None, str | None, str | None]  # outcome, fault kind, reason
        results: list[Result] = [(None, None, None)] * len(part)
        done = [threading.Event() for _ in part]

        def work(k: int, task_text: str, program: dict[str, Any], name: str) -> None:
            try:
                results[k] = self._run_one(task_text, program, url, name)
            finally:
                done[k].set()

        # daemon threads: a program that hangs past its timeout never holds the trainer's exit
        threads = [
            threading.Thread(target=work, args=(k, obs, info["agent_program"], name),
                             name=f"agent-{name}", daemon=True)
            for k, ((obs, info), name) in enumerate(zip(firsts, names))
        ]  # fmt: skip
        timeout = max(float(info["agent_program"]["timeout"]) for _, info in firsts)
        late = (None, "timeout", f"the agent program ran past {timeout:g} s")
        try:
            for t in threads:
                t.start()
            deadline = time.monotonic() + timeout
            for ev in done:
                ev.wait(max(0.0, deadline - time.monotonic()))
            final = [r if ev.is_set() else late for r, ev in zip(results, done)]
        finally:
            sessions = [self.gateway.close_session(n) for n in names]  # later calls get 409
        wall = time.perf_counter() - t0
        eps = []
        for k, ((_, info), spec, sess) in enumerate(zip(firsts, part, sessions)):
            outcome, kind, why = final[k]
            if kind is None and outcome is None:
                outcome = sess.outcome
                if outcome is None:
                    kind, why = "exception", "the agent program reported no reward"
            if kind is None and not sess.calls:
                kind, why = "exception", "the agent program never called the model"
            meta = dict(group=spec.group, traj=traj0 + k, task_id=str(info.get("task_id", "")),
                        category=str(info.get("category", "")), seed=spec.seed)  # fmt: skip
            ep = None
            if kind is None:
                try:
                    ep = session_episode(sess, outcome, **meta)
                except ValueError as exc:
                    kind, why = "exception", str(exc)
            if ep is None:
                ep = EpisodeResult(**meta, truncated=True)
                ep.fault, ep.error = kind, f"agent episode {meta['task_id']!r}: {why}"
            ep.sampling_seed = cseed
            eps.append(ep)
            if stats is not None:
                self._count(stats, sess, ep)
        if stats is not None:
            stats.generate_s += wall
        return eps

    @staticmethod
    def _count(stats: RolloutStats, sess: Session, ep: EpisodeResult) -> None:
        stats.episodes += 1
        stats.engine_calls += len(sess.calls)
        stats.prompt_tokens += sum(len(c.prompt_ids) for c in sess.calls)
        stats.response_tokens += sum(len(c.response_ids) for c in sess.calls)
        stats.counters[PREFIX_BREAKS] = stats.counters.get(PREFIX_BREAKS, 0) + sess.prefix_breaks
        if ep.fault is not None:
            stats.env_errors[ep.fault] = stats.env_errors.get(ep.fault, 0) + 1

    def _run_one(self, task_text: str, program: dict[str, Any], url: str, name: str):
        """Run the program for one episode: ``(outcome or None, fault kind, reason)``."""
        task = json.loads(task_text)
        try:
            if program.get("agent"):
                fn = self._agents[program["agent"]]
                if _takes_client(fn):  # play(task, client): an OpenAI client bound to the session
                    client = openai.OpenAI(base_url=url, api_key=name, max_retries=0,
                                           http_client=self._http_client())  # fmt: skip
                    value = fn(task, client)
                else:
                    value = fn(url, name, task)
            else:
                value = self._command(program, task, url, name)
        except subprocess.TimeoutExpired:
            return None, "timeout", f"the agent command ran past {program['timeout']:g} s"
        except Exception as exc:  # the program's failure costs its episode only
            return None, "exception", f"the agent program raised {type(exc).__name__}: {exc}"[:300]
        if value is None:
            return None, None, None  # the reward, if any, was posted to the session
        try:
            return outcome_of(value), None, None
        except ValueError as exc:
            return None, "exception", f"the agent program returned a bad reward: {exc}"

    def _command(self, program: dict[str, Any], task: dict[str, Any], url: str, name: str):
        """Run the command with the session in its environment; its reward is what it posted,
        else the last line it printed (a number or a JSON object)."""
        cmd = program["command"]
        argv = shlex.split(cmd) if isinstance(cmd, str) else list(cmd)
        env = {**os.environ, "OPENAI_BASE_URL": url, "OPENAI_API_KEY": name,
               "AGENTRL_TASK": json.dumps(task), "AGENTRL_REWARD_URL": f"{url}/sessions/{name}/reward"}  # fmt: skip
        done = subprocess.run(argv, env=env, capture_output=True, text=True,
                              timeout=float(program["timeout"]), stdin=subprocess.DEVNULL)  # fmt: skip
        if done.returncode != 0:
            tail = (done.stderr.strip().splitlines() or ["(no output)"])[-1]
            raise RuntimeError(f"exit status {done.returncode}: {tail[:200]}")
        lines = [x for x in done.stdout.strip().splitlines() if x.strip()]
        if not lines:
            return None
        try:
            return json.loads(lines[-1])
        except ValueError:
            return None

    def _http_client(self) -> Any:
        """One HTTP client for every session's OpenAI client (making one per episode costs
        about 40 ms of CPU, mostly its TLS context); thread-safe, closed with the runner."""
        with self._lock:
            if self._http is None:
                self._http = openai.DefaultHttpxClient()
            return self._http

    def close(self) -> None:
        """Stop the gateway, close the env pool and the backend."""
        if self._http is not None:
            self._http.close()
        self.gateway.close()
        self.pool.close()
        self.backend.close()
