"""Passage corpora: in memory (the generated world) or a wiki-18-style jsonl file, and its index.

The file format is the one Search-R1 and FlashRAG publish for wiki-18 (21M passages): one JSON
object per line with a string ``id`` and ``contents``, where ``contents`` is the quoted title, a
newline, then the text (``"\\"Evan Morris\\"\\nEvan L. Morris (January 26, 1977 ...``). Other keys
are ignored. :func:`open_corpus` validates the file once while indexing it, keeps the byte offset
of every line, and caches the BM25 index and the offsets under ``cache_root("search")``, keyed by
the file's resolved path, size and modification time (a changed file is re-indexed). A passage
is read from the file by offset when retrieved, so the corpus is never held in memory.
"""

from __future__ import annotations

import fcntl
import hashlib
import json
import os
import shutil
import tempfile
import threading
from array import array
from collections.abc import Iterator, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from ..cache import cache_root
from .bm25 import INDEX_FORMAT, BM25Index

__all__ = [
    "CorpusError",
    "JsonlPassages",
    "Passage",
    "PassageList",
    "corpus_key",
    "open_corpus",
    "split_contents",
]


class CorpusError(ValueError):
    """A malformed corpus or question file (the message names the file and line)."""


@dataclass(frozen=True)
class Passage:
    """One passage: its id, title and text, and ``contents`` as the corpus stores it."""

    id: str
    title: str
    text: str
    contents: str

    @classmethod
    def from_contents(cls, pid: str, contents: str) -> Passage:
        title, text = split_contents(contents)
        return cls(pid, title, text, contents)


def split_contents(contents: str) -> tuple[str, str]:
    """``(title, text)`` of wiki-18 ``contents``: the first line without its quotes, the rest."""
    head, _, rest = contents.partition("\n")
    return head.strip().strip('"'), rest.strip()


class PassageList(Sequence[Passage]):
    """Passages held in memory (the generated world's corpus)."""

    def __init__(self, passages: Sequence[Passage]):
        self._passages = list(passages)

    def __len__(self) -> int:
        return len(self._passages)

    def __getitem__(self, i):  # type: ignore[override]
        return self._passages[i]


class JsonlPassages(Sequence[Passage]):
    """Passages of a jsonl corpus read by byte offset (the offsets array is memory-mapped)."""

    def __init__(self, path: Path, offsets: np.ndarray):
        self.path, self.offsets = path, offsets
        self._file = None
        self._lock = threading.Lock()  # a server reads from several threads

    def __len__(self) -> int:
        return len(self.offsets)

    def __getitem__(self, i):  # type: ignore[override]
        with self._lock:
            if self._file is None:
                self._file = open(self.path, "rb")  # noqa: SIM115 - kept open for later reads
            self._file.seek(int(self.offsets[i]))
            line = self._file.readline()
        record = json.loads(line)
        return Passage.from_contents(str(record["id"]), record["contents"])

    def __del__(self) -> None:
        if self._file is not None:
            self._file.close()


def read_corpus(path: Path) -> Iterator[tuple[int, Passage]]:
    """``(byte offset, passage)`` per line of a jsonl corpus; a bad line raises
    :class:`CorpusError` naming the file and line (blank lines are skipped)."""
    offset = 0
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            here, offset = offset, offset + len(raw)
            if not raw.strip():
                continue
            try:
                record = json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise CorpusError(f"{path}:{lineno}: not a JSON object ({exc})") from None
            if not isinstance(record, dict):
                raise CorpusError(f"{path}:{lineno}: not a JSON object")
            for key in ("id", "contents"):
                if key not in record:
                    raise CorpusError(f"{path}:{lineno}: no {key!r} (a passage needs id, contents)")
            if not isinstance(record["contents"], str):
                raise CorpusError(f"{path}:{lineno}: 'contents' must be a string")
            if not isinstance(record["id"], str | int):
                raise CorpusError(f"{path}:{lineno}: 'id' must be a string")
            yield here, Passage.from_contents(str(record["id"]), record["contents"])


def corpus_key(path: Path, k1: float, b: float) -> str:
    """The cache key of ``path``'s index: resolved path, size, mtime and the index settings."""
    st = path.stat()
    payload = json.dumps([str(path.resolve()), st.st_size, st.st_mtime_ns, k1, b, INDEX_FORMAT])
    return hashlib.sha256(payload.encode()).hexdigest()[:16]


def open_corpus(
    path: str | Path,
    *,
    cache_dir: str | Path | None = None,
    k1: float = 0.9,
    b: float = 0.4,
    chunk_docs: int = 50_000,
) -> tuple[BM25Index, JsonlPassages]:
    """The BM25 index and passages of jsonl corpus ``path``, indexed on first use and cached
    (one process builds while the others wait on a lock file)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CorpusError(f"{path}: no such corpus file")
    root = Path(cache_dir) if cache_dir is not None else cache_root("search")
    out = root / f"{path.stem}-{corpus_key(path, k1, b)}"
    if not (out / "meta.json").exists():
        root.mkdir(parents=True, exist_ok=True)
        # One builder at a time: the env workers that open a new corpus together wait for the
        # first one's index instead of each building it.
        with open(root / f".{out.name}.lock", "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            if not (out / "meta.json").exists():
                _build(path, out, k1, b, chunk_docs)
    index = BM25Index.open(out)
    return index, JsonlPassages(path, np.load(out / "offsets.npy", mmap_mode="r"))


def _build(path: Path, out: Path, k1: float, b: float, chunk_docs: int) -> None:
    """Index ``path`` into a temporary sibling of ``out`` renamed into place at the end, so an
    interrupted build never leaves a half-written entry."""
    tmp = Path(tempfile.mkdtemp(prefix=out.name + ".", dir=out.parent))
    try:
        offsets = array("q")  # byte offset of every passage's line

        def texts() -> Iterator[str]:
            for off, passage in read_corpus(path):
                offsets.append(off)
                yield passage.contents

        BM25Index.build(texts(), tmp, k1=k1, b=b, chunk_docs=chunk_docs)
        np.save(tmp / "offsets.npy", np.frombuffer(offsets, dtype=np.int64))
        (tmp / "source.json").write_text(json.dumps({"corpus": str(path.resolve())}))
        os.rename(tmp, out)
    except BaseException:
        shutil.rmtree(tmp, ignore_errors=True)
        raise
