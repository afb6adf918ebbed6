"""Token tries for constrained decoding (shared by backends and the learner).

A request's ``allowed`` sequences (token-id lists) form a trie. While decoding, only the children
of the current node may be sampled; the response ends when a leaf is reached. The learner walks
the same trie along the recorded response to get, for each response position, the token ids
the distribution was renormalised over, so its log-probs match the sampler's.
"""

from __future__ import annotations

from collections.abc import Sequence
from functools import lru_cache

__all__ = ["Trie", "allowed_per_position", "cached_trie"]


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
