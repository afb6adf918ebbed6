"""A vLLM OpenAI-compatible server as a rollout backend: token ids in, token ids out, over HTTP.

:class:`CompletionsBackend` implements :class:`~agentrl.backends.base.Backend` with one
``POST /v1/completions`` per prompt, so a model served by ``python -m agentrl.serve`` plays
through the trainer's own episode runner (``agent=endpoint agent.path=RUN``) exactly as the
in-process engines do:

- the prompt is sent as its token ids (the completions ``prompt`` may be a list of ints), the
  ids :class:`agentrl.rollout.PromptBuilder` built: the server never renders a chat template or
  tokenises, so nothing can differ from the trainer's prompt;
- the response comes back as token ids (vLLM's ``return_token_ids``) and the rollout decodes and
  parses it as it does an in-process response;
- generation stops on the caller's stop tokens only (``ignore_eos`` plus ``stop_token_ids``, with
  the server started with ``--generation-config vllm`` so the checkpoint's
  ``generation_config.json`` adds none), and the token cap is the caller's ``max_new_tokens``;
- constrained decoding uses the trainer's trie: a request carries its allowed token sequences
  (``vllm_xargs``, as JSON) and the server's :class:`~agentrl.backends.vllm_trie.
  TrieLogitsProcessor` (loaded by ``agentrl.serve``) masks each position to the trie's children,
  as :class:`~agentrl.backends.vllm_engine.VLLMBackend` does in process. The first constrained
  call checks that the server really applies it (a server without the processor would ignore
  the field and generate freely) and fails with a one-line hint otherwise.

Request ``i`` of a call is seeded as :class:`VLLMBackend` seeds it, so sampled rollouts are
reproducible against the same server. The log-probs are the server's (``--logprobs-mode
processed_logprobs``: of the distribution sampled from); evaluation does not use them.

Errors (the server unreachable, timeouts, HTTP errors after the client's retries, replies
without token ids) raise :class:`EndpointError` with one line naming the endpoint.
"""

from __future__ import annotations

import logging
from collections.abc import Sequence
from concurrent.futures import ThreadPoolExecutor
from typing import Any

from .base import Generation, SamplingParams
from .trie import ALLOWED_KEY, Trie, cached_trie, encode_allowed, leaf_only_tokens, trie_prefix

__all__ = ["CompletionsBackend", "EndpointError", "quiet_http_logs", "served_model"]


def quiet_http_logs() -> None:
    """The HTTP client logs one INFO line per request, which under Hydra's logging is a line per
    step and episode: keep its warnings only."""
    for name in ("httpx", "httpx2", "httpcore"):
        logging.getLogger(name).setLevel(max(logging.WARNING, logging.getLogger(name).level))


class EndpointError(RuntimeError):
    """The endpoint could not be reached, refused a request (after the client's retries) or
    answered something that is not a completion."""


def _status_error(base_url: str, exc: Any) -> EndpointError:
    """One line: the status and the server's own error message (OpenAI-style error bodies)."""
    body = getattr(exc, "body", None)
    if isinstance(body, dict) and isinstance(body.get("error"), dict):
        body = body["error"]
    text = body.get("message") if isinstance(body, dict) else None
    message = " ".join(str(text or getattr(exc, "message", exc)).split())
    return EndpointError(f"endpoint {base_url} answered HTTP {exc.status_code}: {message}")


def served_model(client: Any, base_url: str, model: str | None) -> dict[str, Any]:
    """The ``/v1/models`` card of ``model`` (or of the one model served when ``model`` is
    ``None``) as a dict (vLLM's carry ``root``, the served folder, and ``max_model_len``)."""
    import openai

    try:
        cards = [c.model_dump() for c in client.models.list().data]
    except openai.APIConnectionError as exc:
        raise EndpointError(f"endpoint {base_url} unreachable: {exc}") from exc
    except openai.APIStatusError as exc:
        raise _status_error(base_url, exc) from exc
    except Exception as exc:  # noqa: BLE001 - a reply that is not a model list
        raise EndpointError(
            f"endpoint {base_url}/models did not answer a model list: {type(exc).__name__}: {exc}"
        ) from exc
    ids = [str(c.get("id")) for c in cards]
    if model is None:
        if len(cards) != 1:
            raise EndpointError(
                f"endpoint {base_url} serves {len(cards)} models ({', '.join(ids) or 'none'}): "
                "name one with agent.model"
            )
        return cards[0]
    for card in cards:
        if card.get("id") == model:
            return card
    raise EndpointError(
        f"endpoint {base_url} does not serve model {model!r} (it serves {', '.join(ids) or 'none'})"
    )


class CompletionsBackend:
    """Generation by a vLLM OpenAI-compatible server (see the module docstring).

    Args:
        base_url: the API root, e.g. ``http://127.0.0.1:8000/v1``.
        model: the served model name; ``None``: the one model the server serves.
        api_key: the bearer token (``"EMPTY"`` for a local server).
        concurrency: requests in flight at once.
        timeout: seconds per request; max_retries: the client's retries on connection errors,
            429 and 5xx replies (with back-off).
        extra_body: extra JSON fields of every request.
    """

    def __init__(
        self,
        base_url: str,
        model: str | None = None,
        *,
        api_key: str = "EMPTY",
        concurrency: int = 16,
        timeout: float = 60.0,
        max_retries: int = 2,
        extra_body: dict[str, Any] | None = None,
    ):
        from openai import OpenAI

        if concurrency < 1:
            raise ValueError(f"concurrency must be >= 1, got {concurrency}")
        self.base_url = base_url.rstrip("/")
        self.timeout, self.max_retries = float(timeout), int(max_retries)
        quiet_http_logs()
        self._client = OpenAI(
            base_url=self.base_url, api_key=api_key, timeout=timeout, max_retries=max_retries
        )
        try:
            self.card = served_model(self._client, self.base_url, model)
        except EndpointError:
            self._client.close()
            raise
        self.model = str(self.card["id"])
        ctx = self.card.get("max_model_len")
        self.max_model_len: int | None = int(ctx) if ctx else None
        self.extra_body = dict(extra_body or {})
        self._executor = ThreadPoolExecutor(max_workers=concurrency, thread_name_prefix="endpoint")
        self._trie_checked = False
        self.requests = 0
        self.tokens_generated = 0

    # ---- one request -------------------------------------------------------------------

    def _body(
        self, i: int, prompt_len: int, sampling: SamplingParams, allowed: Sequence | None
    ) -> tuple[int, dict[str, Any]]:
        """The token cap and the vLLM fields of request ``i`` (as VLLMBackend builds them)."""
        max_tokens = sampling.max_new_tokens
        if self.max_model_len is not None:
            max_tokens = min(max_tokens, self.max_model_len - prompt_len)
        stop = list(sampling.stop_token_ids)
        extra: dict[str, Any] = {
            **self.extra_body,
            "top_k": int(sampling.top_k) if sampling.top_k > 0 else -1,
            "ignore_eos": True,
            "skip_special_tokens": False,
            "return_token_ids": True,
        }
        if allowed is not None:
            max_tokens = min(max_tokens, max(len(s) for s in allowed))
            stop = leaf_only_tokens(allowed)
            extra["vllm_xargs"] = {
                **extra.get("vllm_xargs", {}),
                ALLOWED_KEY: encode_allowed(allowed),
            }
        extra["stop_token_ids"] = stop
        if sampling.seed is not None:
            key = i if sampling.request_ids is None else int(sampling.request_ids[i])
            extra["seed"] = (int(sampling.seed) * 1_000_003 + key) % (2**63 - 1)
        return max_tokens, extra

    def _complete(
        self, prompt: list[int], max_tokens: int, sampling: SamplingParams, extra: dict[str, Any]
    ) -> tuple[list[int], list[float], str]:
        import openai

        try:
            reply = self._client.completions.create(
                model=self.model,
                prompt=prompt,
                max_tokens=max_tokens,
                temperature=float(sampling.temperature),
                top_p=float(sampling.top_p),
                logprobs=0,
                n=1,
                extra_body=extra,
            )
        except openai.APITimeoutError as exc:
            raise EndpointError(
                f"endpoint {self.base_url} did not answer within {self.timeout} s "
                f"(agent.timeout; after {self.max_retries} retries)"
            ) from exc
        except openai.APIConnectionError as exc:
            raise EndpointError(f"endpoint {self.base_url} unreachable: {exc}") from exc
        except openai.APIStatusError as exc:
            raise _status_error(self.base_url, exc) from exc
        except Exception as exc:  # noqa: BLE001 - a body that is not a completion
            raise EndpointError(
                f"endpoint {self.base_url} answered something that is not a completion: "
                f"{type(exc).__name__}: {exc}"
            ) from exc
        choices = getattr(reply, "choices", None)
        if not choices:
            raise EndpointError(f"endpoint {self.base_url} answered a completion without choices")
        choice = choices[0]
        tokens = getattr(choice, "token_ids", None)
        if not isinstance(tokens, list) or not all(isinstance(t, int) for t in tokens):
            raise EndpointError(
                f"endpoint {self.base_url} answered without the response's token ids (a vLLM "
                "server answers them to return_token_ids; serve with python -m agentrl.serve)"
            )
        lp = getattr(getattr(choice, "logprobs", None), "token_logprobs", None) or []
        logprobs = [float(x) if x is not None else 0.0 for x in lp][: len(tokens)]
        logprobs += [0.0] * (len(tokens) - len(logprobs))
        finish = "length" if getattr(choice, "finish_reason", None) == "length" else "stop"
        return tokens, logprobs, finish

    # ---- the Backend interface ---------------------------------------------------------

    def _check_trie(self) -> None:
        """Once: a request allowed only token ``t`` must answer ``t``, for two values of ``t``
        (a server without agentrl's logits processor ignores the allowed sequences)."""
        if self._trie_checked:
            return
        probe = SamplingParams(max_new_tokens=1, temperature=0.0)
        for t in (1, 2):
            max_tokens, extra = self._body(0, 1, probe, [[t]])
            tokens, _, _ = self._complete([0], max_tokens, probe, extra)
            if tokens[:1] != [t]:
                raise EndpointError(
                    f"endpoint {self.base_url} does not apply agentrl's constrained decoding "
                    "(start it with python -m agentrl.serve, which loads "
                    "agentrl.backends.vllm_trie:TrieLogitsProcessor, or set agent.constrained=false)"
                )
        self._trie_checked = True

    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
    ) -> list[Generation]:
        """One response per prompt, the requests in flight together (``concurrency``)."""
        if allowed is not None and len(allowed) != len(prompts):
            raise ValueError(f"allowed has {len(allowed)} entries for {len(prompts)} prompts")
        if allowed is not None and any(a is not None for a in allowed):
            self._check_trie()
        results: list[Generation | None] = [None] * len(prompts)
        jobs: list[tuple[int, list[int], int, dict[str, Any], Trie | None]] = []
        for i, prompt in enumerate(prompts):
            ids = [int(t) for t in prompt]
            if not ids:
                raise ValueError(f"prompt {i} is empty")
            req_allowed = allowed[i] if allowed is not None else None
            if self.max_model_len is not None and len(ids) >= self.max_model_len:
                extra = {"truncated": "prompt_too_long", "prompt_len": len(ids)}
                results[i] = Generation([], [], "length", extra=extra)
                continue
            max_tokens, body = self._body(i, len(ids), sampling, req_allowed)
            trie = cached_trie(req_allowed) if req_allowed is not None else None
            jobs.append((i, ids, max_tokens, body, trie))
        replies = list(
            self._executor.map(lambda job: self._complete(job[1], job[2], sampling, job[3]), jobs)
        )
        self.requests += len(jobs)
        for (i, _, _, _, trie), (tokens, logprobs, finish) in zip(jobs, replies, strict=True):
            if trie is not None:
                keep, complete = trie_prefix(trie, tokens)
                if keep < len(tokens) and not complete:
                    raise EndpointError(
                        f"endpoint {self.base_url}: a constrained response left the allowed "
                        f"sequences at token {keep} ({tokens})"
                    )
                tokens, logprobs = tokens[:keep], logprobs[:keep]
                finish = "stop" if complete else "length"
            self.tokens_generated += len(tokens)
            results[i] = Generation(tokens, logprobs, finish)  # type: ignore[arg-type]
        return results  # type: ignore[return-value]

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        raise NotImplementedError("a served model's weights are the server's (restart it)")

    def close(self) -> None:
        self._executor.shutdown(wait=True)
        self._client.close()
