"""Constrained decoding inside vLLM: the shared token trie (:mod:`agentrl.backends.trie`) walked by
a vLLM v1 logits processor.

A grammar (``choice``/``regex`` structured outputs) would allow *every* tokenisation of an action
string, while the learner masks with the trie of the exact token sequences the rollout built;
:class:`TrieLogitsProcessor` makes the engine and the learner use one and the same support. A
request carries its allowed sequences in ``SamplingParams.extra_args[ALLOWED_KEY]``; its stop
tokens are :func:`leaf_only_tokens`, and :func:`trie_prefix` trims what the engine returns.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import torch
from vllm import SamplingParams as VLLMSamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from .trie import Trie

__all__ = ["ALLOWED_KEY", "TrieLogitsProcessor", "leaf_only_tokens", "trie_prefix"]

#: Key under ``vllm.SamplingParams.extra_args`` carrying a request's allowed token sequences.
ALLOWED_KEY = "agentrl_allowed"


def leaf_only_tokens(sequences: Sequence[Sequence[int]]) -> list[int]:
    """Token ids that, wherever the trie of ``sequences`` allows them, complete a sequence.

    Used as the request's vLLM stop tokens: sampling one means a leaf was reached, so the engine
    stops exactly where the HF backend (which ends a constrained response at a leaf) stops.
    """
    inner = {tuple(s[:k]) for s in sequences for k in range(1, len(s))}
    into_leaf: set[int] = set()
    into_inner: set[int] = set()
    for s in sequences:
        for k in range(1, len(s) + 1):
            (into_inner if tuple(s[:k]) in inner else into_leaf).add(int(s[k - 1]))
    return sorted(into_leaf - into_inner)


def trie_prefix(trie: Trie, tokens: Sequence[int]) -> tuple[int, bool]:
    """Length of the longest prefix of ``tokens`` on the trie, stopping at the first leaf, and
    whether that prefix is a complete allowed sequence."""
    node = trie.root
    for i, tok in enumerate(tokens):
        if trie.is_leaf(node):
            return i, True
        try:
            node = trie.step(node, tok)
        except KeyError:
            return i, False
    return len(tokens), trie.is_leaf(node)


class _TrieState:
    """Cursor of one request in its trie; ``output`` is vLLM's live list of generated ids."""

    __slots__ = ("consumed", "node", "output", "trie")

    def __init__(self, trie: Trie, output: list[int]) -> None:
        self.trie = trie
        self.node: int | None = trie.root
        self.output = output
        self.consumed = 0

    def allowed(self) -> list[int] | None:
        """Advance over newly generated tokens; return the allowed next ids (None: no mask)."""
        out = self.output
        while self.consumed < len(out):
            tok = out[self.consumed]
            if tok < 0:  # async-scheduling placeholder, not yet a real token
                break
            if self.node is not None:
                try:
                    self.node = self.trie.step(self.node, tok)
                except KeyError:
                    self.node = None
            self.consumed += 1
        if self.node is None or self.trie.is_leaf(self.node):
            # Off the trie (cannot happen while the mask holds) or past a complete sequence that
            # was not ended by a stop token: leave the row alone; generate() trims the tokens.
            return None
        return self.trie.children(self.node)


class TrieLogitsProcessor(LogitsProcessor):
    """vLLM v1 logits processor: restricts each constrained request to the tokens that keep its
    response on its trie (``SamplingParams.extra_args["agentrl_allowed"]``).

    Not argmax-invariant, so vLLM applies it before temperature and top-k/top-p, and with
    ``logprobs_mode="processed_logprobs"`` the reported log-probs are renormalised over the
    allowed tokens, as the learner computes them.
    """

    @classmethod
    def validate_params(cls, sampling_params: VLLMSamplingParams) -> None:
        allowed = (sampling_params.extra_args or {}).get(ALLOWED_KEY)
        if allowed is not None and not (
            isinstance(allowed, list)
            and allowed
            and all(isinstance(s, list) and s for s in allowed)
        ):
            raise ValueError(
                f"extra_args[{ALLOWED_KEY!r}] must be a non-empty list of non-empty lists"
            )

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.states: dict[int, _TrieState] = {}

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        def new_state(
            params: VLLMSamplingParams, _prompt: Any, output: list[int]
        ) -> _TrieState | None:
            allowed = (params.extra_args or {}).get(ALLOWED_KEY)
            return None if allowed is None else _TrieState(Trie(allowed), output)

        process_dict_updates(self.states, batch_update, new_state)

    def apply(self, logits: torch.Tensor) -> torch.Tensor:
        if not self.states:
            return logits
        constrained: list[int] = []
        rows: list[int] = []
        cols: list[int] = []
        for row, state in self.states.items():
            allowed = state.allowed()
            if allowed is None:
                continue
            rows.extend([len(constrained)] * len(allowed))
            cols.extend(allowed)
            constrained.append(row)
        if not constrained:
            return logits
        keep = torch.zeros((len(constrained), logits.shape[1]), dtype=torch.bool)
        keep[rows, cols] = True
        index = torch.tensor(constrained, dtype=torch.long).to(logits.device, non_blocking=True)
        keep = keep.to(logits.device, non_blocking=True)
        masked = logits.index_select(0, index).masked_fill_(~keep, float("-inf"))
        return logits.index_copy_(0, index, masked)
