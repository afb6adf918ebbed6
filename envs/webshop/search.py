"""BM25 search that ranks exactly as the reference's pyserini/Lucene 8 index, in pure numpy.

The reference indexes one field per product (``contents``, see ``store.search_document``) with
Lucene's English analyser and searches it with pyserini's ``SimpleSearcher``: BM25 with k1 = 0.9,
b = 0.4; a bag-of-words query (one clause per distinct query term, boosted by how often the term
occurs in the query); hits sorted by score, ties broken by the document id string (the ASIN);
the top 50 (``SEARCH_RETURN_N``). This module computes the same float32 scores:

- terms: :func:`agentrl.envs.webshop.lucene.analyze` (Lucene's analyser, token for token);
- document length: the number of indexed terms, stored in one byte as Lucene stores norms
  (``SmallFloat.intToByte4``: exact up to 23, then four significant bits);
- per term: ``idf = log(1 + (N - n + 0.5) / (n + 0.5))`` (double, then float32), ``w = boost *
  idf``, and per document ``w - w / (1 + tf * inv[norm])`` with ``inv[i] = 1 / (k1 * (1 - b + b
  * len(i) / avgdl))``, all in float32 in Lucene's operation order; a document's score is the
  sum of its terms' scores in double, rounded to float32 (as Lucene's boolean scorers do);
- ranking: score descending, then ASIN ascending (byte order).

``1 + tf * inv[norm]`` depends only on the index, so it is computed once per posting at build
time; a query reads the postings of its terms (memory-mapped arrays) and does a few vectorised
float32 operations. Every process maps the same files, so the page cache holds one copy.
"""

from __future__ import annotations

import bisect
import json
import math
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

from .lucene import analyze, byte4_to_int, int_to_byte4

__all__ = ["BM25_B", "BM25_K1", "INDEX_FORMAT", "SEARCH_RETURN_N", "BM25Index"]

SEARCH_RETURN_N = 50
#: pyserini's defaults (``SearchArgs``: bm25.k1 0.9, bm25.b 0.4), as float32 like Lucene's.
BM25_K1 = np.float32(0.9)
BM25_B = np.float32(0.4)
#: Bump when the files below change.
INDEX_FORMAT = 1

_ONE = np.float32(1.0)


def norm_inverse_table(avgdl: np.float32) -> np.ndarray:
    """Lucene's per-norm cache ``1 / (k1 * ((1 - b) + b * LENGTH_TABLE[i] / avgdl))``, float32."""
    lengths = np.array([byte4_to_int(i) for i in range(256)], dtype=np.float64).astype(np.float32)
    return (_ONE / (BM25_K1 * ((_ONE - BM25_B) + BM25_B * lengths / np.float32(avgdl)))).astype(
        np.float32
    )


def idf(doc_freq: int, doc_count: int) -> np.float32:
    """Lucene's BM25 idf (computed in double, returned as float32)."""
    return np.float32(math.log(1.0 + (doc_count - doc_freq + 0.5) / (doc_freq + 0.5)))


class _Strings:
    """A sorted list of byte strings stored back to back (blob + offsets), indexable for bisect."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray):
        self.blob, self.offsets = blob, offsets

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> bytes:
        return self.blob[int(self.offsets[i]) : int(self.offsets[i + 1])].tobytes()

    def find(self, key: bytes) -> int:
        """Position of ``key``, or -1."""
        i = bisect.bisect_left(self, key)
        return i if i < len(self) and self[i] == key else -1


class BM25Index:
    """A read-only BM25 index opened (memory-mapped) from directory ``path`` (see :meth:`build`)."""

    def __init__(self, path: str | Path):
        path = Path(path)
        try:
            meta = json.loads((path / "meta.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a WebShop search index ({exc})") from exc
        if meta.get("format") != INDEX_FORMAT:
            raise ValueError(f"{path}: index format {meta.get('format')}, expected {INDEX_FORMAT}")
        self.num_docs = int(meta["num_docs"])
        self.doc_count = int(meta["doc_count"])
        self.sum_total_term_freq = int(meta["sum_total_term_freq"])
        self.avgdl = np.float32(meta["avgdl"])

        def load(name: str) -> np.ndarray:
            return np.load(path / f"{name}.npy", mmap_mode="r")

        self.vocab = _Strings(load("vocab_blob"), load("vocab_offsets"))
        self.post_offsets = load("post_offsets")
        self.post_docs = load("post_docs")
        self.post_den = load("post_den")
        self.norms = load("norms")
        self.tiebreak = load("tiebreak")
        self._term_numbers: dict[str, int] = {}

    # -- building --------------------------------------------------------------------------------
    @staticmethod
    def build(documents: Iterable[str], ids: Iterable[str], path: str | Path) -> int:
        """Index ``documents`` (a document's position is its number; ``ids`` are the id strings
        that break score ties, the ASINs) into directory ``path``; returns the number indexed."""
        path = Path(path)
        path.mkdir(parents=True, exist_ok=True)
        term_ids: dict[str, int] = {}
        p_term = np.zeros(0, dtype=np.int32)
        chunks_t: list[np.ndarray] = []
        chunks_d: list[np.ndarray] = []
        chunks_f: list[np.ndarray] = []
        lengths: list[int] = []
        for doc, text in enumerate(documents):
            terms = analyze(text)
            lengths.append(len(terms))
            counts = Counter(terms)
            chunks_t.append(
                np.fromiter(
                    (term_ids.setdefault(t, len(term_ids)) for t in counts),
                    dtype=np.int32,
                    count=len(counts),
                )
            )
            chunks_f.append(np.fromiter(counts.values(), dtype=np.int32, count=len(counts)))
            chunks_d.append(np.full(len(counts), doc, dtype=np.int32))
        num_docs = len(lengths)
        id_list = list(ids)
        if len(id_list) != num_docs:
            raise ValueError(f"{len(id_list)} ids for {num_docs} documents")
        if chunks_t:
            p_term = np.concatenate(chunks_t)
        p_doc = np.concatenate(chunks_d) if chunks_d else np.zeros(0, np.int32)
        p_freq = np.concatenate(chunks_f) if chunks_f else np.zeros(0, np.int32)
        del chunks_t, chunks_d, chunks_f

        # Terms in byte order: a term's number is its position, found by binary search.
        vocab = [t.encode("utf-8") for t in term_ids]
        order = sorted(range(len(vocab)), key=vocab.__getitem__)
        rank = np.empty(len(vocab), dtype=np.int32)
        rank[np.asarray(order, dtype=np.int64)] = np.arange(len(vocab), dtype=np.int32)
        sorted_vocab = [vocab[i] for i in order]
        blob = np.frombuffer(b"".join(sorted_vocab), dtype=np.uint8)
        v_off = np.zeros(len(sorted_vocab) + 1, dtype=np.int64)
        v_off[1:] = np.cumsum([len(v) for v in sorted_vocab])

        # Postings grouped by term (documents ascending inside each term).
        p_term = rank[p_term] if p_term.size else p_term
        by_term = np.lexsort((p_doc, p_term))
        p_term, p_doc, p_freq = p_term[by_term], p_doc[by_term], p_freq[by_term]
        post_off = np.zeros(len(sorted_vocab) + 1, dtype=np.int64)
        np.cumsum(np.bincount(p_term, minlength=len(sorted_vocab)), out=post_off[1:])

        length_arr = np.asarray(lengths, dtype=np.int64)
        norms = np.fromiter((int_to_byte4(n) for n in lengths), dtype=np.uint8, count=num_docs)
        doc_count = int(np.count_nonzero(length_arr))
        sum_ttf = int(length_arr.sum())
        avgdl = np.float32(sum_ttf / doc_count) if doc_count else np.float32(1.0)
        inv = norm_inverse_table(avgdl)
        den = (_ONE + p_freq.astype(np.float32) * inv[norms[p_doc]]).astype(np.float32)

        id_bytes = [str(i).encode("utf-8") for i in id_list]
        tiebreak = np.empty(num_docs, dtype=np.int32)
        tiebreak[np.asarray(sorted(range(num_docs), key=id_bytes.__getitem__), dtype=np.int64)] = (
            np.arange(num_docs, dtype=np.int32)
        )

        for name, arr in (
            ("vocab_blob", blob),
            ("vocab_offsets", v_off),
            ("post_offsets", post_off),
            ("post_docs", p_doc.astype(np.int32)),
            ("post_den", den),
            ("norms", norms),
            ("tiebreak", tiebreak),
        ):
            np.save(path / f"{name}.npy", arr)
        meta = {
            "format": INDEX_FORMAT,
            "num_docs": num_docs,
            "doc_count": doc_count,
            "sum_total_term_freq": sum_ttf,
            "avgdl": float(avgdl),
            "k1": float(BM25_K1),
            "b": float(BM25_B),
            "num_terms": len(sorted_vocab),
        }
        (path / "meta.json").write_text(json.dumps(meta, indent=1))
        return num_docs

    # -- searching -------------------------------------------------------------------------------
    def query_terms(self, query: str) -> list[tuple[int, int]]:
        """``(term number, boost)`` for each distinct analysed query term found in the index."""
        out = []
        for term, count in Counter(analyze(query)).items():
            t = self._term_numbers.get(term)
            if t is None:
                t = self.vocab.find(term.encode("utf-8"))
                if len(self._term_numbers) < 1 << 16:  # bounded per-process cache
                    self._term_numbers[term] = t
            if t >= 0:
                out.append((t, count))
        return out

    def _accumulate(self, query: str) -> np.ndarray | None:
        """Per-document scores (float64 sums of float32 term scores), or None if nothing matches."""
        terms = self.query_terms(query)
        if not terms:
            return None
        docs, parts = [], []
        for t, boost in terms:
            lo, hi = int(self.post_offsets[t]), int(self.post_offsets[t + 1])
            w = np.float32(np.float32(boost) * idf(hi - lo, self.doc_count))
            docs.append(self.post_docs[lo:hi])
            parts.append(w - w / self.post_den[lo:hi])
        if len(docs) == 1:
            acc = np.zeros(self.num_docs, dtype=np.float64)
            acc[docs[0]] = parts[0]
            return acc
        return np.bincount(
            np.concatenate(docs), weights=np.concatenate(parts), minlength=self.num_docs
        )

    def scores(self, query: str) -> tuple[np.ndarray, np.ndarray]:
        """``(documents, float32 scores)`` of every document matching ``query``, by document."""
        acc = self._accumulate(query)
        if acc is None:
            return np.zeros(0, dtype=np.int64), np.zeros(0, dtype=np.float32)
        docs = np.flatnonzero(acc)
        return docs, acc[docs].astype(np.float32)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Numbers of the best ``k`` documents for ``query``: score descending, then id."""
        if k <= 0:
            return []
        docs, scores = self.scores(query)
        if docs.size > k:
            kth = np.partition(scores, docs.size - k)[docs.size - k]
            keep = scores >= kth
            docs, scores = docs[keep], scores[keep]
        order = np.lexsort((self.tiebreak[docs], -scores))[:k]
        return docs[order].tolist()
