"""Token tries for constrained decoding (shared by backends and the learner).

A request's ``allowed`` sequences (token-id lists) form a trie. While decoding, only the children
of the current node may be sampled; the response ends when a leaf is reached. The learner walks
the same trie along the recorded response to get, for each response position, the token ids
the distribution was renormalised over, so its log-probs match the sampler's.

The engine-side helpers (:func:`leaf_only_tokens`, :func:`trie_prefix`, and the request field
:data:`ALLOWED_KEY` with its JSON form for servers) live here too, free of vLLM: the in-process
engine (:mod:`.vllm_engine`), the server's logits processor (:mod:`.vllm_trie`) and the server's
client (:mod:`.remote`) share them.
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from functools import lru_cache
from typing import Any

__all__ = [
    "ALLOWED_KEY",
    "Trie",
    "allowed_per_position",
    "cached_trie",
    "encode_allowed",
    "leaf_only_tokens",
    "request_allowed",
    "trie_prefix",
]


class Trie:
    """A trie over token sequences: ``node = trie.root``; ``trie.children(node)`` -> ids."""

    __slots__ = ("_nodes",)

    def __init__(self, sequences: Sequence[Sequence[int]]):
        if not sequences:
            raise ValueError("constrained decoding needs at least one allowed sequence")
        self._nodes: list[dict[int, int]] = [{}]
        for seq in sequences:
            if len(seq) == 0:
                raise ValueError("an allowed sequence is empty")
            node = 0
            for tok in seq:
                nxt = self._nodes[node].get(int(tok))
                if nxt is None:
                    nxt = len(self._nodes)
                    self._nodes[node][int(tok)] = nxt
                    self._nodes.append({})
                node = nxt

    root = 0

    def children(self, node: int) -> list[int]:
        return list(self._nodes[node])

    def is_leaf(self, node: int) -> bool:
        return not self._nodes[node]

    def step(self, node: int, token: int) -> int:
        """The child reached by ``token``; ``KeyError`` when the token leaves the trie."""
        return self._nodes[node][int(token)]


@lru_cache(maxsize=4096)
def _trie_of(sequences: tuple[tuple[int, ...], ...]) -> Trie:
    return Trie(sequences)


def cached_trie(sequences: Sequence[Sequence[int]]) -> Trie:
    """A trie for ``sequences``, shared between calls with the same sequences (tries are never
    mutated after construction)."""
    return _trie_of(tuple(tuple(int(t) for t in s) for s in sequences))


def allowed_per_position(
    sequences: Sequence[Sequence[int]], response: Sequence[int]
) -> list[list[int]]:
    """For each position of ``response``, the token ids the trie allowed there.

    Raises ``ValueError`` when the response is not a path of the trie (it was not sampled under
    this constraint), so a mismatch cannot silently bias the importance ratio.
    """
    trie = cached_trie(sequences)
    node = trie.root
    out = []
    for pos, tok in enumerate(response):
        kids = trie.children(node)
        if int(tok) not in kids:
            raise ValueError(
                f"response token {int(tok)} at position {pos} is outside the allowed sequences"
            )
        out.append(kids)
        node = trie.step(node, tok)
    return out


#: Key under ``vllm.SamplingParams.extra_args`` carrying a request's allowed token sequences.
ALLOWED_KEY = "agentrl_allowed"


def encode_allowed(sequences: Sequence[Sequence[int]]) -> str:
    """The allowed sequences as the JSON string an OpenAI-server request carries (vLLM's
    ``vllm_xargs`` admits no nested lists)."""
    return json.dumps([[int(t) for t in s] for s in sequences], separators=(",", ":"))


def request_allowed(extra_args: Mapping[str, Any] | None) -> list[list[int]] | None:
    """A request's allowed sequences from its ``extra_args`` (a list of lists, or the JSON string
    of :func:`encode_allowed`); ``None`` when the request is not constrained. Raises
    ``ValueError`` on anything else, so a malformed request is refused at admission."""
    allowed = (extra_args or {}).get(ALLOWED_KEY)
    if allowed is None:
        return None
    if isinstance(allowed, str):
        try:
            allowed = json.loads(allowed)
        except json.JSONDecodeError as exc:
            raise ValueError(f"extra_args[{ALLOWED_KEY!r}] is not valid JSON: {exc}") from None
    if not (
        isinstance(allowed, list)
        and allowed
        and all(
            isinstance(s, list) and s and all(isinstance(t, int) and t >= 0 for t in s)
            for s in allowed
        )
    ):
        raise ValueError(
            f"extra_args[{ALLOWED_KEY!r}] must be a non-empty list of non-empty lists of token ids"
        )
    return allowed


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
