"""Constrained decoding inside vLLM: the shared token trie (:mod:`agentrl.backends.trie`) walked by
a vLLM v1 logits processor.

A grammar (``choice``/``regex`` structured outputs) would allow *every* tokenisation of an action
string, while the learner masks with the trie of the exact token sequences the rollout built;
:class:`TrieLogitsProcessor` makes the engine and the learner use one and the same support. A
request carries its allowed sequences in ``SamplingParams.extra_args[ALLOWED_KEY]``; its stop
tokens are :func:`leaf_only_tokens`, and :func:`trie_prefix` trims what the engine returns.

Over vLLM's OpenAI-compatible server (``python -m agentrl.serve`` loads this processor), a
request's ``vllm_xargs`` can only hold flat lists, so the sequences travel as one JSON string
under the same key (:func:`~agentrl.backends.trie.encode_allowed`); :func:`~agentrl.backends.
trie.request_allowed` reads either form. (These helpers live in :mod:`agentrl.backends.trie`,
which needs no vLLM, so a client of a server can use them.)
"""

from __future__ import annotations

from typing import Any

import torch
from vllm import SamplingParams as VLLMSamplingParams
from vllm.v1.sample.logits_processor import BatchUpdate, LogitsProcessor
from vllm.v1.sample.logits_processor.builtin import process_dict_updates

from .trie import (
    ALLOWED_KEY,
    Trie,
    encode_allowed,
    leaf_only_tokens,
    request_allowed,
    trie_prefix,
)

__all__ = [
    "ALLOWED_KEY",
    "TrieLogitsProcessor",
    "encode_allowed",
    "leaf_only_tokens",
    "request_allowed",
    "trie_prefix",
]


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
        request_allowed(sampling_params.extra_args)

    def __init__(self, vllm_config: Any, device: torch.device, is_pin_memory: bool) -> None:
        self.states: dict[int, _TrieState] = {}

    def is_argmax_invariant(self) -> bool:
        return False

    def update_state(self, batch_update: BatchUpdate | None) -> None:
        def new_state(
            params: VLLMSamplingParams, _prompt: Any, output: list[int]
        ) -> _TrieState | None:
            allowed = request_allowed(params.extra_args)
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
