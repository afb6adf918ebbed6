"""One thread that owns the backend: requests from many sessions are batched into engine calls.

Backends are not thread-safe and sample a whole batch per call, so the gateway's HTTP handlers
never call the backend themselves: they queue a request and wait for its future. The engine
thread takes every request queued so far, groups those that share sampling settings, and sends
each group as one ``Backend.generate`` call. Request ``i`` of a group samples with
``(seed, request_ids[i])`` (the backends' per-request seeding), so a call's sample does not depend
on which other calls it was batched with; ``sessions[i]`` names its session (an engine of several
servers keeps a session on one server). A request with a ``sink`` gets its tokens as they are
sampled where the backend streams (``Backend.generate``'s ``on_tokens``).
"""

from __future__ import annotations

import queue
import threading
from collections.abc import Callable, Sequence
from concurrent.futures import Future
from dataclasses import dataclass, replace

from ..backends.base import Backend, Generation, SamplingParams

__all__ = ["Engine"]


@dataclass
class _Request:
    prompt: list[int]
    sampling: SamplingParams  # its seed and settings (request ids and sessions set per batch)
    request_id: int
    session: str
    future: Future
    allowed: list[tuple[int, ...]] | None = None  # the token sequences it may produce (None: free)
    sink: Callable[[list[int]], None] | None = None  # its tokens as sampled (a streamed reply)


class Engine:
    """Batches queued requests into backend calls on one thread (:meth:`close` stops it)."""

    def __init__(self, backend: Backend, max_batch: int = 256):
        self.backend, self.max_batch = backend, max_batch
        # SimpleQueue: put and get in C, no Python-level condition to wake the engine thread
        self._queue: queue.SimpleQueue[_Request | None] = queue.SimpleQueue()
        self._thread = threading.Thread(target=self._run, name="gateway-engine", daemon=True)
        self._closed = False
        self.calls = 0  # backend calls made
        self._thread.start()

    @property
    def streams(self) -> bool:
        """Whether the backend hands over tokens as it samples them."""
        return bool(getattr(self.backend, "streams", False))

    def submit(
        self,
        prompt: Sequence[int],
        sampling: SamplingParams,
        request_id: int,
        session: str,
        allowed: list[tuple[int, ...]] | None = None,
        sink: Callable[[list[int]], None] | None = None,
    ) -> Future:
        """A future of the :class:`Generation` of ``prompt`` (within ``allowed``'s sequences
        when given: the backends' constrained decoding); ``sink`` gets its tokens as they are
        sampled, on the engine's thread, where the backend streams."""
        fut: Future = Future()
        if self._closed:
            fut.set_exception(RuntimeError("the gateway's engine is closed"))
            return fut
        self._queue.put(
            _Request(list(prompt), sampling, int(request_id), session, fut, allowed, sink)
        )
        return fut

    def _run(self) -> None:
        while True:
            first = self._queue.get()
            if first is None:
                break
            batch = [first]
            while len(batch) < self.max_batch:
                try:
                    nxt = self._queue.get_nowait()
                except queue.Empty:
                    break
                if nxt is None:
                    self._queue.put(None)  # stop after this batch
                    break
                batch.append(nxt)
            groups: dict[SamplingParams, list[_Request]] = {}
            for r in batch:
                groups.setdefault(r.sampling, []).append(r)
            for sampling, reqs in groups.items():
                self._generate(sampling, reqs)
        while True:  # fail what is left
            try:
                r = self._queue.get_nowait()
            except queue.Empty:
                break
            if r is not None:
                r.future.set_exception(RuntimeError("the gateway's engine is closed"))

    def _generate(self, sampling: SamplingParams, reqs: list[_Request]) -> None:
        params = replace(
            sampling,
            request_ids=tuple(r.request_id for r in reqs),
            sessions=tuple(r.session for r in reqs),
        )
        stream = {}
        if any(r.sink is not None for r in reqs) and self.streams:
            sinks = [r.sink for r in reqs]

            def on_tokens(i: int, ids: Sequence[int]) -> None:
                sink = sinks[i]
                if sink is not None:
                    sink(list(ids))

            stream["on_tokens"] = on_tokens
        try:
            allowed = [r.allowed for r in reqs]
            gens: list[Generation] = self.backend.generate(
                [r.prompt for r in reqs], params, allowed if any(allowed) else None, **stream
            )
            self.calls += 1
        except Exception as exc:  # the callers answer with the reason; the thread goes on
            for r in reqs:
                r.future.set_exception(exc)
            return
        for r, g in zip(reqs, gens):
            r.future.set_result(g)

    def close(self) -> None:
        """Stop the thread after the requests already queued."""
        if not self._closed:
            self._closed = True
            self._queue.put(None)
            self._thread.join(timeout=60)
