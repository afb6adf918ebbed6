"""BM25 search over a catalogue, with ``bm25s`` as the engine and an index that lives on disk.

Scoring follows the reference's pyserini/Lucene setup: Lucene's BM25 variant with pyserini's
default parameters (k1 = 0.9, b = 0.4), documents analysed like Lucene's English analyzer (see
:func:`agentrl.envs.webshop.text.search_tokens`), the top 50 hits returned (``SEARCH_RETURN_N``), and only
documents that share at least one term with the query (Lucene returns no zero-score hits).

The index is saved once and opened with ``mmap``: its arrays (and our sorted vocabulary, looked
up by binary search instead of a Python dict) are memory-mapped read-only, so every env and
every worker process on a machine shares one copy in the page cache.
"""

from __future__ import annotations

import logging
from collections.abc import Iterable
from pathlib import Path

import bm25s
import numpy as np

from .text import search_tokens

__all__ = ["BM25_PARAMS", "SEARCH_RETURN_N", "BM25Index"]

SEARCH_RETURN_N = 50
BM25_PARAMS = {"k1": 0.9, "b": 0.4, "method": "lucene"}

logging.getLogger("bm25s").setLevel(logging.WARNING)


class BM25Index:
    """A read-only BM25 index opened from ``path`` (see :meth:`build`)."""

    def __init__(self, path: str | Path):
        path = Path(path)
        self.retriever = bm25s.BM25.load(path, mmap=True, load_vocab=False, show_progress=False)
        self.vocab = np.load(path / "vocab.npy", mmap_mode="r")
        self.num_docs = int(self.retriever.scores["num_docs"])

    @staticmethod
    def build(documents: Iterable[str], path: str | Path) -> int:
        """Index ``documents`` (their position is their id) into directory ``path``; returns
        the number of documents."""
        path = Path(path)
        ids_by_token: dict[str, int] = {}
        doc_ids: list[list[int]] = []
        for text in documents:
            doc_ids.append(
                [ids_by_token.setdefault(t, len(ids_by_token)) for t in search_tokens(text)]
            )
        # Final ids are positions in the byte-sorted vocabulary, so lookups are a binary search.
        tokens = np.array([t.encode("utf-8") for t in ids_by_token] or [b""], dtype=bytes)
        order = np.argsort(tokens, kind="stable")
        remap = np.empty(len(order), dtype=np.int64)
        remap[order] = np.arange(len(order))
        vocab = tokens[order]
        corpus = [remap[np.asarray(d, dtype=np.int64)].tolist() for d in doc_ids]
        retriever = bm25s.BM25(**BM25_PARAMS)
        vocab_dict = {i: i for i in range(len(vocab))}
        retriever.index((corpus, vocab_dict), create_empty_token=False, show_progress=False)
        retriever.vocab_dict = {}  # ours is vocab.npy
        retriever.save(path, show_progress=False)
        np.save(path / "vocab.npy", vocab)
        return len(corpus)

    def token_ids(self, query: str) -> np.ndarray:
        """Ids of the query's analysed tokens that occur in the index."""
        toks = np.array([t.encode("utf-8") for t in search_tokens(query)], dtype=bytes)
        if toks.size == 0:
            return np.zeros(0, dtype=np.int32)
        pos = np.searchsorted(self.vocab, toks)
        pos = np.minimum(pos, len(self.vocab) - 1)
        return pos[self.vocab[pos] == toks].astype(np.int32)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Ids of the best ``k`` documents for ``query``, best first (ties: lower id first)."""
        ids = self.token_ids(query)
        if ids.size == 0:
            return []
        scores = self.retriever.get_scores_from_ids(ids)
        hits = np.flatnonzero(scores > 0)
        if hits.size > k:
            top = np.argpartition(-scores[hits], k - 1)[:k]
            hits = hits[top]
        order = np.lexsort((hits, -scores[hits]))
        return hits[order].tolist()
