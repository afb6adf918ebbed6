"""BM25 over a passage corpus in numpy: a streaming build into memory-mapped arrays, top-k search.

Why our own engine rather than a library: the index of a 21M-passage corpus (wiki-18) must be
built on one machine in bounded memory and opened by every env worker without a copy.
``build`` reads the texts once, in chunks: each chunk's (term, passage, tf) triples are counted
with numpy and spilled to disk; a second pass gathers them one term range at a time into the
final posting arrays, written sequentially as ``.npy`` files. Peak memory is one chunk (or one
term range) plus the vocabulary, not the corpus (bm25s, the maintained library closest to this, MIT-licensed, builds its score
matrix from all tokens in memory). ``open(path)`` maps the files read-only, so every process
shares the page cache's one copy. Ranking is fully deterministic: score descending, then passage
number ascending, so the local index and a server serving it give identical lists.

Scoring is BM25 with pyserini's defaults (k1 = 0.9, b = 0.4) and Lucene's idf
``log(1 + (N - df + 0.5) / (df + 0.5))``; the per-posting impact
``idf * tf * (k1 + 1) / (tf + k1 * (1 - b + b * dl / avgdl))`` is computed at build time (float32),
so a query sums the impacts of its terms (weighted by how often a term occurs in the query).
Analysis (:func:`analyze`): lower-case, Unicode word characters (``\\w+``), Lucene's 33 English
stop words removed; no stemming (pyserini's default analyser stems with Porter: queries here must
match word forms).
"""

from __future__ import annotations

import bisect
import json
import re
import shutil
from array import array
from collections import Counter
from collections.abc import Iterable
from pathlib import Path

import numpy as np

__all__ = ["INDEX_FORMAT", "STOP_WORDS", "BM25Index", "analyze"]

#: Bump when the files written by :meth:`BM25Index.build` or :func:`analyze` change.
INDEX_FORMAT = 1

#: Lucene's English stop words (``EnglishAnalyzer.ENGLISH_STOP_WORDS_SET``), as pyserini uses.
STOP_WORDS = frozenset(
    ("a", "an", "and", "are", "as", "at", "be", "but", "by", "for", "if", "in", "into", "is")
    + ("it", "no", "not", "of", "on", "or", "such", "that", "the", "their", "then", "there")
    + ("these", "they", "this", "to", "was", "will", "with")
)

_WORD = re.compile(r"\w+")
_ARRAYS = ("post_offsets", "post_docs", "post_scores", "doc_lengths", "vocab_blob", "vocab_offsets")
_ARRAYS += ("vocab_sorted",)


def analyze(text: str) -> list[str]:
    """The index terms of ``text``: lower-cased word tokens without stop words."""
    return [t for t in _WORD.findall(text.lower()) if t not in STOP_WORDS]


class _Vocabulary:
    """Terms by number (utf-8 blob + offsets) and their byte order (for binary search)."""

    def __init__(self, blob: np.ndarray, offsets: np.ndarray, order: np.ndarray):
        self.blob, self.offsets, self.order = blob, offsets, order

    def __len__(self) -> int:
        return len(self.order)

    def term(self, number: int) -> bytes:
        return self.blob[int(self.offsets[number]) : int(self.offsets[number + 1])].tobytes()

    def __getitem__(self, i: int) -> bytes:  # the i-th term in byte order (for bisect)
        return self.term(int(self.order[i]))

    def find(self, term: str) -> int:
        """The number of ``term``, or -1."""
        key = term.encode("utf-8")
        i = bisect.bisect_left(self, key)
        return int(self.order[i]) if i < len(self) and self[i] == key else -1


class BM25Index:
    """A BM25 index: built with :meth:`build`, opened (memory-mapped) with :meth:`open`."""

    def __init__(self, arrays: dict[str, np.ndarray], meta: dict):
        self.meta = meta
        self.num_docs = int(meta["num_docs"])
        self.arrays = arrays
        self.post_offsets = arrays["post_offsets"]
        self.post_docs = arrays["post_docs"]
        self.post_scores = arrays["post_scores"]
        self.vocab = _Vocabulary(
            arrays["vocab_blob"], arrays["vocab_offsets"], arrays["vocab_sorted"]
        )
        self._numbers: dict[str, int] = {}

    # -- building --------------------------------------------------------------------------------
    @classmethod
    def build(
        cls,
        texts: Iterable[str],
        path: str | Path | None = None,
        *,
        k1: float = 0.9,
        b: float = 0.4,
        chunk_docs: int = 50_000,
        partition_postings: int = 1 << 24,
    ) -> BM25Index:
        """Index ``texts`` (a text's position is its passage number).

        With ``path`` the index is written there (a directory, created) and returned opened from
        it, memory-mapped; without, it is built in memory. Pass 1 counts ``chunk_docs`` passages
        at a time and, with ``path``, spills each chunk's postings to disk (sorted by term).
        Pass 2 fills the posting arrays one term range of at most ``partition_postings``
        postings at a time (gathered from every chunk, in passage order) and writes it
        sequentially, so memory stays bounded and the output is never written at random.
        """
        out = Path(path) if path is not None else None
        spill = out / "_build" if out is not None else None
        if spill is not None:
            spill.mkdir(parents=True, exist_ok=True)
        vocab: dict[str, int] = {}
        df = np.zeros(1024, dtype=np.int64)
        lengths: list[np.ndarray] = []
        chunks: list[tuple[np.ndarray, np.ndarray, np.ndarray] | Path] = []
        flat = array("q")  # the chunk's term numbers (8 bytes each, no int objects kept)
        chunk_lengths: list[int] = []
        start = 0

        def flush() -> None:
            nonlocal df, start, flat, chunk_lengths
            n = len(chunk_lengths)
            if n == 0:
                return
            terms = np.frombuffer(flat, dtype=np.int64).copy() if flat else np.zeros(0, np.int64)
            local = np.repeat(np.arange(n, dtype=np.int64), chunk_lengths)
            keys, tfs = np.unique(terms * n + local, return_counts=True)  # sorted: term, doc
            t, d = keys // n, keys % n + start
            if len(vocab) > len(df):
                df = np.concatenate(
                    [df, np.zeros(max(len(vocab), 2 * len(df)) - len(df), np.int64)]
                )
            df[: len(vocab)] += np.bincount(t, minlength=len(vocab))
            arrays = (t.astype(np.int32), d.astype(np.int32), tfs.astype(np.int32))
            if spill is not None:
                name = spill / f"chunk{len(chunks):06d}"
                for suffix, arr in zip("tdf", arrays):
                    np.save(f"{name}_{suffix}.npy", arr)
                chunks.append(name)
            else:
                chunks.append(arrays)
            lengths.append(np.asarray(chunk_lengths, dtype=np.int32))
            start += n
            flat, chunk_lengths = array("q"), []

        for text in texts:
            ids = [vocab.setdefault(term, len(vocab)) for term in analyze(text)]
            flat.extend(ids)
            chunk_lengths.append(len(ids))
            if len(chunk_lengths) >= chunk_docs:
                flush()
        flush()

        num_docs, num_terms = start, len(vocab)
        df = df[:num_terms]
        doc_lengths = np.concatenate(lengths) if lengths else np.zeros(0, np.int32)
        nonempty = int(np.count_nonzero(doc_lengths))
        avgdl = float(doc_lengths.sum()) / nonempty if nonempty else 1.0
        idf = np.log(1.0 + (num_docs - df + 0.5) / (df + 0.5))
        post_offsets = np.zeros(num_terms + 1, dtype=np.int64)
        np.cumsum(df, out=post_offsets[1:])
        total = int(post_offsets[-1])
        norm = k1 * (1.0 - b + b * doc_lengths.astype(np.float64) / avgdl)

        def alloc(name: str, dtype, shape) -> np.ndarray:
            if out is None:
                return np.empty(shape, dtype=dtype)
            return np.lib.format.open_memmap(
                out / f"{name}.npy", mode="w+", dtype=dtype, shape=shape
            )

        def chunk_arrays(chunk) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
            if isinstance(chunk, Path):
                return tuple(np.load(f"{chunk}_{s}.npy", mmap_mode="r") for s in "tdf")
            return chunk

        post_docs = alloc("post_docs", np.int32, (total,))
        post_scores = alloc("post_scores", np.float32, (total,))
        cuts = np.searchsorted(post_offsets, np.arange(0, total, max(1, partition_postings)))
        bounds = np.unique(np.concatenate([[0], np.minimum(cuts, num_terms), [num_terms]]))
        for ta, tb in zip(bounds[:-1].tolist(), bounds[1:].tolist()):
            base, size = int(post_offsets[ta]), int(post_offsets[tb] - post_offsets[ta])
            buf_docs = np.empty(size, np.int32)
            buf_scores = np.empty(size, np.float32)
            cursor = post_offsets[ta:tb] - base
            for chunk in chunks:
                t_all, d_all, f_all = chunk_arrays(chunk)
                lo, hi = np.searchsorted(t_all, [ta, tb])
                t = np.asarray(t_all[lo:hi], dtype=np.int64)
                if t.size == 0:
                    continue
                d, f = np.asarray(d_all[lo:hi]), np.asarray(f_all[lo:hi], dtype=np.float64)
                u, first, counts = np.unique(t, return_index=True, return_counts=True)
                pos = cursor[t - ta] + (np.arange(t.size) - np.repeat(first, counts))
                buf_docs[pos] = d
                buf_scores[pos] = idf[t] * f * (k1 + 1.0) / (f + norm[d])
                cursor[u - ta] += counts
            post_docs[base : base + size] = buf_docs
            post_scores[base : base + size] = buf_scores
            del buf_docs, buf_scores
        chunks.clear()
        if spill is not None:
            shutil.rmtree(spill, ignore_errors=True)

        encoded = [term.encode("utf-8") for term in vocab]  # in number order (dict order)
        vocab.clear()
        vocab_offsets = np.zeros(num_terms + 1, dtype=np.int64)
        np.cumsum([len(e) for e in encoded], out=vocab_offsets[1:])
        vocab_blob = np.frombuffer(b"".join(encoded), dtype=np.uint8)
        vocab_sorted = np.asarray(sorted(range(num_terms), key=encoded.__getitem__), np.int32)
        del encoded
        arrays = {
            "post_offsets": post_offsets,
            "post_docs": post_docs,
            "post_scores": post_scores,
            "doc_lengths": doc_lengths,
            "vocab_blob": vocab_blob,
            "vocab_offsets": vocab_offsets,
            "vocab_sorted": vocab_sorted,
        }
        meta = {
            "format": INDEX_FORMAT,
            "num_docs": num_docs,
            "num_terms": num_terms,
            "num_postings": total,
            "avgdl": avgdl,
            "k1": k1,
            "b": b,
        }
        if out is None:
            return cls(arrays, meta)
        for name in ("post_docs", "post_scores"):
            arrays[name].flush()
        for name, arr in arrays.items():
            if name not in ("post_docs", "post_scores"):
                np.save(out / f"{name}.npy", arr)
        (out / "meta.json").write_text(json.dumps(meta, indent=1))
        del arrays, post_docs, post_scores
        return cls.open(out)

    @classmethod
    def open(cls, path: str | Path, *, mmap: bool = True) -> BM25Index:
        """Open an index written by :meth:`build` (memory-mapped unless ``mmap=False``)."""
        path = Path(path)
        try:
            meta = json.loads((path / "meta.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{path}: not a BM25 index ({exc})") from exc
        if meta.get("format") != INDEX_FORMAT:
            raise ValueError(f"{path}: index format {meta.get('format')}, expected {INDEX_FORMAT}")
        mode = "r" if mmap else None
        arrays = {name: np.load(path / f"{name}.npy", mmap_mode=mode) for name in _ARRAYS}
        return cls(arrays, meta)

    # -- searching -------------------------------------------------------------------------------
    @property
    def nbytes(self) -> int:
        """Bytes of the index arrays (on disk, or in memory for an in-memory index)."""
        return int(sum(a.nbytes for a in self.arrays.values()))

    def term_number(self, term: str) -> int:
        """The number of an analysed ``term``, or -1 (cached per index, bounded)."""
        n = self._numbers.get(term)
        if n is None:
            n = self.vocab.find(term)
            if len(self._numbers) < 1 << 16:
                self._numbers[term] = n
        return n

    def search(self, query: str, k: int) -> tuple[np.ndarray, np.ndarray]:
        """The best ``k`` passages for ``query``: ``(passage numbers, float64 scores)``, by score
        descending, then passage number ascending; empty when no query term is indexed."""
        weights = Counter()
        for term in analyze(query):
            n = self.term_number(term)
            if n >= 0:
                weights[n] += 1
        if k <= 0 or not weights:
            return np.zeros(0, np.int64), np.zeros(0, np.float64)
        docs_parts, score_parts = [], []
        for n, w in weights.items():
            lo, hi = int(self.post_offsets[n]), int(self.post_offsets[n + 1])
            docs_parts.append(np.asarray(self.post_docs[lo:hi], dtype=np.int64))
            score_parts.append(np.asarray(self.post_scores[lo:hi], dtype=np.float64) * w)
        if len(docs_parts) == 1:
            docs, scores = docs_parts[0], score_parts[0]
        else:
            all_docs, all_scores = np.concatenate(docs_parts), np.concatenate(score_parts)
            if all_docs.size * 16 > self.num_docs:  # long lists: a dense sum beats sorting them
                acc = np.bincount(all_docs, weights=all_scores, minlength=self.num_docs)
                docs = np.flatnonzero(acc)  # every impact is > 0: the matching passages
                scores = acc[docs]
            else:
                docs, inverse = np.unique(all_docs, return_inverse=True)
                scores = np.bincount(inverse, weights=all_scores)
        if docs.size > k:
            kth = np.partition(scores, docs.size - k)[docs.size - k]
            keep = scores >= kth
            docs, scores = docs[keep], scores[keep]
        order = np.lexsort((docs, -scores))[:k]
        return docs[order], scores[order]
