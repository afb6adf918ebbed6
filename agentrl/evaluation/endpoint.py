"""An agent behind an OpenAI-compatible chat endpoint (``vllm serve``, any hosted API).

Each step sends one chat-completions request per live episode (concurrently, up to
``concurrency`` at once). The messages come from ``messages_fn(episode)``, the trainer's prompt
builder (:class:`agentrl.rollout.PromptBuilder`) when built from a config, and the action is
read from the reply by ``parse_fn(text)``, the trainer's parser (:class:`agentrl.rollout.
ActionFormat`): the model sees what it saw in training. A reply with no parseable action sends
an empty action to the env and counts as invalid, as in training.

``constrain=True`` (vLLM servers) restricts each reply to the admissible actions written in the
response template, through vLLM's ``structured_outputs={"choice": [...]}``: the endpoint
counterpart of the trainer's constrained decoding. (vLLM's grammar admits every tokenisation of
a choice, the trainer's trie only the canonical one; the set of texts is the same, but a reply
may take up to one token per character: leave ``max_tokens`` that much room.) States whose
actions are open or templated (``search[<your query>]``) are generated freely.

Reproducibility: ``temperature`` defaults to 0 and every request carries a ``seed`` derived from
the episode's agent seed and the step index, which vLLM honours for sampled decoding.
"""

from __future__ import annotations

import re
from collections.abc import Callable, Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from omegaconf import OmegaConf

from ..episodes import Episode
from ..pool import EnvPool
from ..rollout import ActionFormat, PromptBuilder, PromptConfig
from .runner import Action
from .tasks import derive_seed

__all__ = ["EndpointAgent", "EndpointError"]

Messages = list[dict[str, str]]
_PLACEHOLDER = re.compile(r"<[^<>]*>")


class EndpointError(RuntimeError):
    """The endpoint could not be reached or refused a request (after the client's retries)."""


class EndpointAgent:
    """Chat-completions agent.

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name.
        messages_fn: ``episode -> [{"role": ..., "content": ...}, ...]``.
        parse_fn: ``reply text -> action`` or ``None`` when the reply holds no action.
        api_key: sent as a bearer token (``"EMPTY"`` for a local vLLM server).
        temperature, top_p, max_tokens: sampling settings of every request.
        concurrency: requests in flight at once.
        timeout: seconds per request; max_retries: the client's retries on connection errors,
            429 and 5xx replies (with back-off).
        extra_body: extra JSON fields for the server (e.g. vLLM's ``{"top_k": 20}``).
        constrain: restrict replies to the admissible actions (vLLM's structured outputs),
            each written with ``render_fn(action)`` (default: ``<action>{action}</action>``).
    """

    name = "endpoint"

    def __init__(
        self,
        base_url: str,
        model: str,
        messages_fn: Callable[[Episode], Messages],
        parse_fn: Callable[[str], str | None],
        *,
        api_key: str = "EMPTY",
        temperature: float = 0.0,
        top_p: float = 1.0,
        max_tokens: int = 64,
        concurrency: int = 16,
        timeout: float = 60.0,
        max_retries: int = 2,
        extra_body: dict[str, Any] | None = None,
        constrain: bool = False,
        render_fn: Callable[[str], str] | None = None,
    ):
        from openai import OpenAI

        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        if temperature < 0:
            raise ValueError(f"temperature must be >= 0, got {temperature}")
        if max_tokens < 1:
            raise ValueError(f"max_tokens must be >= 1, got {max_tokens}")
        self.base_url, self.model = base_url, model
        self.messages_fn, self.parse_fn = messages_fn, parse_fn
        self.temperature, self.top_p, self.max_tokens = (
            float(temperature),
            float(top_p),
            int(max_tokens),
        )
        self.extra_body = dict(extra_body or {})
        self.constrain = bool(constrain)
        self.render_fn = render_fn or (lambda action: f"<action>{action}</action>")
        self._client = OpenAI(
            base_url=base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="endpoint")
        self.requests = 0

    def _complete(self, messages: Messages, seed: int, choices: list[str] | None) -> str:
        import openai

        extra = dict(self.extra_body)
        if choices:
            extra["structured_outputs"] = {**extra.get("structured_outputs", {}), "choice": choices}
        try:
            reply = self._client.chat.completions.create(
                model=self.model,
                messages=messages,
                temperature=self.temperature,
                top_p=self.top_p,
                max_tokens=self.max_tokens,
                seed=seed,
                n=1,
                extra_body=extra or None,
            )
        except openai.APIConnectionError as exc:
            raise EndpointError(f"endpoint {self.base_url} unreachable: {exc}") from exc
        except openai.APIStatusError as exc:
            raise EndpointError(
                f"endpoint {self.base_url} answered HTTP {exc.status_code}: {exc.message}"
            ) from exc
        if not reply.choices:
            return ""
        return reply.choices[0].message.content or ""

    def _choices(self, ep: Episode) -> list[str] | None:
        actions = ep.admissible_actions
        if not self.constrain or not actions or any(_PLACEHOLDER.search(a) for a in actions):
            return None
        return [self.render_fn(a) for a in actions]

    def act(self, episodes: Sequence[Episode], pool: EnvPool) -> list[Action | str]:
        jobs = [
            (self.messages_fn(ep), derive_seed(ep.task.agent_seed, ep.steps), self._choices(ep))
            for ep in episodes
        ]
        texts = list(self._executor.map(lambda job: self._complete(*job), jobs))
        self.requests += len(texts)
        out: list[Action | str] = []
        for text in texts:
            action = self.parse_fn(text)
            out.append(
                Action(action, text, True) if action is not None else Action("", text, False)
            )
        return out

    @classmethod
    def from_config(cls, agent_cfg: Any, cfg: Any = None) -> EndpointAgent:
        """From ``configs/agent/endpoint.yaml``: prompts and parsing by the trainer's
        :class:`~agentrl.rollout.PromptBuilder` and :class:`~agentrl.rollout.ActionFormat`, with
        the settings of ``agent.prompt`` and ``agent.action_format``."""
        c = (
            OmegaConf.to_container(agent_cfg, resolve=True)
            if not isinstance(agent_cfg, dict)
            else dict(agent_cfg)
        )
        prompt = PromptConfig(**(c.get("prompt") or {}))
        fmt = ActionFormat(**(c.get("action_format") or {}))
        builder = PromptBuilder(None, prompt)  # messages only: the server applies its chat template

        def messages_fn(ep: Episode) -> Messages:
            turns = ep.history  # the trainer's Turn: each shows its observation and response
            k = prompt.history
            turns = turns if k == -1 else (turns[-k:] if k > 0 else [])
            return builder.messages(ep.instruction, turns, ep.observation, ep.admissible_actions)

        for key in ("base_url", "model"):
            if not c.get(key):
                raise ValueError(f"agent=endpoint needs agent.{key}")
        return cls(
            c["base_url"],
            c["model"],
            messages_fn,
            lambda text: fmt.parse(text).action,
            api_key=c.get("api_key") or "EMPTY",
            temperature=c.get("temperature", 0.0),
            top_p=c.get("top_p", 1.0),
            max_tokens=c.get("max_tokens", 64),
            concurrency=c.get("concurrency", 16),
            timeout=c.get("timeout", 60.0),
            max_retries=c.get("max_retries", 2),
            extra_body=c.get("extra_body"),
            constrain=c.get("constrain", False),
            render_fn=fmt.render,
        )

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._client.close()
