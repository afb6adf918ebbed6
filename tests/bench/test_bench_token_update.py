"""scripts/bench_token_update.py's token counts: distinct tokens and the prefix-trie bound."""

from __future__ import annotations

from . import load_script


def test_token_counts_by_hand():
    tokens = load_script("bench_token_update")._tokens
    # distinct rows (1,2,3), (1,2,4), (1,5): 3 + 3 + 2 = 8 tokens; the trie has the nodes
    # 1, 1-2, 1-2-3, 1-2-4, 1-5: 5 tokens to compute when rows share their common prefixes
    assert tokens([(1, 2, 3), (1, 2, 4), (1, 5), (1, 2, 3)]) == (8, 5)
    assert tokens([(7,), (8, 9)]) == (3, 3)  # nothing shared
    assert tokens([(1, 2), (1, 2, 3)]) == (5, 3)  # a row that is another's prefix
    assert tokens([]) == (0, 0)
