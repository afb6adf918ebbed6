"""Hugging Face transformers backend: batched sampling with log-probs (CPU and GPU).

A hand-written decoding loop over a KV cache rather than ``model.generate``: it needs per-request
tries (constrained decoding), per-request seeds and the exact log-prob of each sampled token
under the distribution it was drawn from, and it drops finished requests from the batch.

Log-probs are those of the temperature-scaled distribution, restricted and renormalised to the
trie's tokens when the request is constrained (the learner recomputes exactly this). ``top_p`` /
``top_k`` only truncate the sampling; the reported log-prob is the untruncated one (as vLLM's
default). Greedy decoding (``temperature == 0``) reports log-probs at temperature 1.

Sampling is reproducible per request: with ``sampling.seed`` set, request ``i`` of a call draws
its uniforms from ``numpy.random.default_rng([seed, i])`` (inverse-CDF sampling), whatever the
batch composition or chunking.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import numpy as np
import torch

from .base import Generation, Handover, SamplingParams, TokenSink
from .trie import Trie, cached_trie

__all__ = ["HFBackend"]


class HFBackend:
    """Generation with a transformers causal LM (or a peft model wrapping one).

    Args:
        model: the policy. The trainer passes the learner's own module, so no weight copy is
            needed after an update (``update_weights`` is then a no-op).
        pad_token_id: the tokenizer's pad id (left padding).
        max_batch_size: requests per forward pass; larger calls are processed in chunks.
        max_batch_tokens: also cap a chunk's padded prompt tokens (bounds the KV cache and the
            prefill's activations for long prompts); ``None``: no cap.
        seed: seeds the fallback generator used when ``sampling.seed`` is ``None``.

    It streams: ``generate(..., on_tokens=sink)`` hands each request's tokens to ``sink`` as
    they are sampled (forced runs of the trie at once), from the calling thread.
    """

    streams = True

    def __init__(
        self,
        model: torch.nn.Module,
        pad_token_id: int,
        max_batch_size: int = 256,
        seed: int = 0,
        max_batch_tokens: int | None = None,
    ):
        if max_batch_size < 1:
            raise ValueError(f"max_batch_size must be >= 1, got {max_batch_size}")
        self.model = model
        self.pad_token_id = int(pad_token_id)
        self.max_batch_size = int(max_batch_size)
        self.max_batch_tokens = None if max_batch_tokens is None else int(max_batch_tokens)
        self._rng = np.random.default_rng(seed)
        self.tokens_generated = 0

    @property
    def device(self) -> torch.device:
        return next(self.model.parameters()).device

    def update_weights(self, state_dict: dict[str, Any]) -> None:
        """Load new weights, unless they are this backend's own model's (shared with the learner)."""
        own = self.model.state_dict()
        if all(k in own and own[k].data_ptr() == v.data_ptr() for k, v in state_dict.items()):
            return
        self.model.load_state_dict(state_dict, strict=False)

    def close(self) -> None:
        self.model = None

    # ------------------------------------------------------------------------------------------
    def generate(
        self,
        prompts: Sequence[Sequence[int]],
        sampling: SamplingParams,
        allowed: Sequence[Sequence[Sequence[int]] | None] | None = None,
        on_tokens: TokenSink | None = None,
    ) -> list[Generation]:
        n = len(prompts)
        if allowed is not None and len(allowed) != n:
            raise ValueError(f"{len(allowed)} allowed-sequence lists for {n} prompts")
        for i, p in enumerate(prompts):
            if len(p) == 0:
                raise ValueError(f"prompt {i} is empty")
        handover = None if on_tokens is None else Handover(on_tokens, n)
        tries = [
            None if allowed is None or allowed[i] is None else cached_trie(allowed[i])
            for i in range(n)
        ]
        uniforms = self._uniforms(n, sampling)
        out: list[Generation | None] = [None] * n
        # Chunks of similar prompt length waste less padding.
        order = sorted(range(n), key=lambda i: len(prompts[i]))
        for idx in self._chunks(order, [len(p) + sampling.max_new_tokens for p in prompts]):
            sink = None if handover is None else _chunk_offer(handover, idx)
            gens = self._generate_chunk(
                [prompts[i] for i in idx], sampling, [tries[i] for i in idx], uniforms[idx], sink
            )
            for i, g in zip(idx, gens):
                out[i] = g
        return out  # type: ignore[return-value]

    def _chunks(self, order: list[int], lengths: list[int]) -> list[list[int]]:
        """Consecutive chunks of ``order`` (ascending length) within the request and token caps."""
        chunks: list[list[int]] = []
        cur: list[int] = []
        for i in order:
            too_many = len(cur) >= self.max_batch_size
            too_long = (
                self.max_batch_tokens is not None
                and cur
                and (len(cur) + 1) * lengths[i] > self.max_batch_tokens
            )
            if too_many or too_long:
                chunks.append(cur)
                cur = []
            cur.append(i)
        if cur:
            chunks.append(cur)
        return chunks

    def _uniforms(self, n: int, sampling: SamplingParams) -> np.ndarray:
        k = sampling.max_new_tokens
        ids = range(n) if sampling.request_ids is None else sampling.request_ids
        if len(ids) != n:
            raise ValueError(f"{len(ids)} request_ids for {n} prompts")
        if sampling.seed is None:
            u = self._rng.random((n, k))
        else:
            u = (
                np.stack(
                    [
                        np.random.default_rng([int(sampling.seed) & 0xFFFFFFFF, int(i)]).random(k)
                        for i in ids
                    ]
                )
                if n
                else np.zeros((0, k))
            )
        return 1.0 - u  # in (0, 1]: inverse-CDF sampling never lands on a zero-probability token

    @torch.no_grad()
    def _generate_chunk(
        self,
        prompts: list[Sequence[int]],
        sampling: SamplingParams,
        tries: list[Trie | None],
        uniforms: np.ndarray,
        sink: Callable[[int, list[int]], None] | None = None,
    ) -> list[Generation]:
        model, device = self.model, self.device
        cap = sampling.max_new_tokens
        stop = set(int(t) for t in sampling.stop_token_ids)
        B = len(prompts)
        tokens: list[list[int]] = [[] for _ in range(B)]
        logps: list[list[float]] = [[] for _ in range(B)]
        finish = ["length"] * B
        nodes = [Trie.root if t is not None else -1 for t in tries]
        done = [False] * B
        # Jump-forward: tokens the trie forces (a single child) need no sampling: they get
        # log-prob 0 (the renormalised distribution over one token), a forced prefix joins the
        # prefill, and a forced run that ends the response needs no forward pass at all.
        for b, t in enumerate(tries):
            if t is not None:
                self._advance_forced(b, t, nodes, tokens, logps, finish, done, cap, prefix=True)

        def flush(rows: Sequence[int]) -> None:  # each row's tokens so far to the stream
            if sink is not None:
                for r in rows:
                    sink(r, tokens[r])

        flush(range(B))
        active = [b for b in range(B) if not done[b]]
        if not active:
            self.tokens_generated += sum(len(t) for t in tokens)
            return [Generation(tokens[b], logps[b], finish[b]) for b in range(B)]  # type: ignore[arg-type]
        was_training = model.training
        model.eval()
        full = [list(prompts[b]) + tokens[b] for b in active]
        width = max(len(p) for p in full)
        ids = torch.full((len(active), width), self.pad_token_id, dtype=torch.long)
        mask = torch.zeros((len(active), width), dtype=torch.long)
        for j, p in enumerate(full):
            ids[j, width - len(p) :] = torch.as_tensor(p, dtype=torch.long)
            mask[j, width - len(p) :] = 1
        ids, mask = ids.to(device), mask.to(device)
        positions = (mask.cumsum(-1) - 1).clamp(min=0)
        u = torch.as_tensor(uniforms, dtype=torch.float64)
        try:
            out = model(
                input_ids=ids,
                attention_mask=mask,
                position_ids=positions,
                use_cache=True,
                logits_to_keep=1,
            )
            cache = out.past_key_values
            last_pos = positions[:, -1]
            while True:
                logits = out.logits[:, -1, :].float()
                allow_mask = self._allow_mask(
                    logits, [tries[r] for r in active], [nodes[r] for r in active]
                )
                draws = u[active, [len(tokens[r]) for r in active]]
                chosen, chosen_logp = _sample(logits, allow_mask, sampling, draws)
                keep = []
                for j, r in enumerate(active):
                    tok = int(chosen[j])
                    tokens[r].append(tok)
                    logps[r].append(float(chosen_logp[j]))
                    if tries[r] is not None:
                        nodes[r] = tries[r].step(nodes[r], tok)
                        self._advance_forced(
                            r, tries[r], nodes, tokens, logps, finish, done, cap, prefix=False
                        )
                    elif tok in stop:
                        finish[r], done[r] = "stop", True
                    if not done[r] and len(tokens[r]) >= cap:
                        done[r] = True  # finish stays "length"
                    if not done[r]:
                        keep.append(j)
                flush(active)
                if not keep:
                    break
                next_ids = chosen.view(-1, 1).to(device)
                if len(keep) < len(active):  # drop finished requests from the batch and the cache
                    sel = torch.as_tensor(keep, device=device)
                    cache.batch_select_indices(sel)
                    mask, last_pos, next_ids = mask[sel], last_pos[sel], next_ids[sel]
                    active = [active[j] for j in keep]
                mask = torch.cat(
                    [mask, torch.ones((len(active), 1), dtype=mask.dtype, device=device)], dim=1
                )
                last_pos = last_pos + 1
                out = model(
                    input_ids=next_ids,
                    attention_mask=mask,
                    position_ids=last_pos.view(-1, 1),
                    past_key_values=cache,
                    use_cache=True,
                )
                cache = out.past_key_values
        finally:
            if was_training:
                model.train()
        self.tokens_generated += sum(len(t) for t in tokens)
        return [Generation(tokens[b], logps[b], finish[b]) for b in range(B)]  # type: ignore[arg-type]

    @staticmethod
    def _advance_forced(b, trie, nodes, tokens, logps, finish, done, cap, prefix: bool) -> None:
        """Append the trie's forced tokens from ``nodes[b]``: all of them when building the
        prefill prefix; after a sampled token only a run that reaches the end (a leaf), since a
        run stopping at a branch would have to be fed through the model token by token."""
        node, run = nodes[b], []
        while not trie.is_leaf(node) and len(trie.children(node)) == 1:
            tok = trie.children(node)[0]
            run.append(tok)
            node = trie.step(node, tok)
        if not prefix and not trie.is_leaf(node):
            return
        room = cap - len(tokens[b])
        tokens[b].extend(run[:room])
        logps[b].extend([0.0] * min(len(run), room))
        if len(run) > room:
            done[b] = True  # cut by max_new_tokens: finish stays "length"
            return
        nodes[b] = node
        if trie.is_leaf(node):
            finish[b], done[b] = "stop", True

    @staticmethod
    def _allow_mask(
        logits: torch.Tensor, tries: list[Trie | None], nodes: list[int]
    ) -> torch.Tensor | None:
        if all(t is None for t in tries):
            return None
        mask = torch.zeros(logits.shape, dtype=torch.bool, device=logits.device)
        for j, (t, node) in enumerate(zip(tries, nodes)):
            if t is None:
                mask[j] = True
            else:
                mask[j, t.children(node)] = True
        return mask


def _sample(
    logits: torch.Tensor, allow: torch.Tensor | None, sampling: SamplingParams, u: torch.Tensor
) -> tuple[torch.Tensor, torch.Tensor]:
    """Sample one token per row; returns (token ids, log-probs of those tokens)."""
    greedy = sampling.temperature == 0
    scaled = logits if greedy else logits / sampling.temperature
    if allow is not None:
        scaled = scaled.masked_fill(~allow, float("-inf"))
    logp = torch.log_softmax(scaled, dim=-1)
    if greedy:
        tok = logp.argmax(dim=-1)
    else:
        probs = logp.exp()
        if sampling.top_k > 0 or sampling.top_p < 1.0:
            probs = _truncate(probs, sampling.top_k, sampling.top_p)
        cdf = probs.double().cumsum(dim=-1)
        target = (u.to(cdf.device) * cdf[:, -1]).unsqueeze(-1)
        tok = torch.searchsorted(cdf, target).squeeze(-1).clamp(max=probs.shape[-1] - 1)
    return tok.cpu(), logp.gather(-1, tok.view(-1, 1).to(logp.device)).squeeze(-1).cpu()


def _truncate(probs: torch.Tensor, top_k: int, top_p: float) -> torch.Tensor:
    """Zero the probabilities outside the top-k / nucleus (the most likely token always stays)."""
    sorted_p, order = probs.sort(dim=-1, descending=True)
    keep = torch.ones_like(sorted_p, dtype=torch.bool)
    if top_k > 0:
        keep[:, top_k:] = False
    if top_p < 1.0:
        before = sorted_p.cumsum(dim=-1) - sorted_p
        keep &= before < top_p
    keep[:, 0] = True
    mask = torch.zeros_like(keep).scatter(-1, order, keep)
    return probs * mask


def _chunk_offer(handover: Handover, idx: Sequence[int]) -> Callable[[int, list[int]], None]:
    """The stream of one chunk: its row ``r`` is request ``idx[r]`` of the call."""
    return lambda r, tokens: handover.offer(idx[r], tokens)
