"""A catalogue on disk: products, goals and the BM25 index, opened memory-mapped and shared.

Layout of a catalogue directory (written once, atomically, then only read)::

    meta.json            sizes, split, where it came from
    products.bin/.npy    JSON records back to back / their byte offsets (int64, n + 1)
    goals.bin/.npy       the same for goals, in split order (test = the first ``num_test``)
    index/               the BM25 index (see ``search.py``)

Why: an env needs a handful of products per step, never the whole catalogue. Records are decoded
on demand from a read-only ``mmap``, so a process holds no catalogue in Python objects; every env
in a process shares one :class:`Catalogue` (:func:`open_catalogue` caches it by path), and every
process on the machine shares the same pages of the OS page cache, whatever the multiprocessing
start method (fork, forkserver, spawn). Writers build into a temporary directory under a file
lock and rename it into place, so concurrent workers never see a half-written catalogue and only
one of them builds it.
"""

from __future__ import annotations

import fcntl
import json
import mmap
import os
import shutil
import threading
from collections.abc import Callable, Iterable
from functools import lru_cache
from pathlib import Path
from typing import Any

import numpy as np

from .search import SEARCH_RETURN_N, BM25Index

__all__ = ["STORE_VERSION", "Catalogue", "ensure_catalogue", "open_catalogue", "write_catalogue"]

STORE_VERSION = 2  # 2: Lucene-identical BM25 index (search.py)


def search_document(product: dict[str, Any]) -> str:
    """The text indexed for a product, as the reference's index: title, description, first
    feature and the options, lower-cased."""
    option_text = ", and ".join(f"{k}: {', '.join(v)}" for k, v in product["options"].items())
    first = product["BulletPoints"][0] if product["BulletPoints"] else ""
    return " ".join([product["Title"], product["Description"], first, option_text]).lower()


class _Records:
    """JSON records stored back to back in a file, decoded on demand through ``mmap``."""

    def __init__(self, blob: Path, offsets: Path):
        self.offsets = np.load(offsets, mmap_mode="r")
        with open(blob, "rb") as f:
            self.mm = (
                mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ) if os.path.getsize(blob) else b""
            )

    def __len__(self) -> int:
        return len(self.offsets) - 1

    def __getitem__(self, i: int) -> dict[str, Any]:
        if not 0 <= i < len(self):
            raise IndexError(f"record {i} out of range ({len(self)} records)")
        return json.loads(self.mm[int(self.offsets[i]) : int(self.offsets[i + 1])])

    @staticmethod
    def write(
        records: Iterable[dict[str, Any]], blob: Path, offsets: Path, each: Callable | None = None
    ) -> int:
        offs = [0]
        with open(blob, "wb") as f:
            for r in records:
                if each is not None:
                    each(r)
                data = json.dumps(r, ensure_ascii=False, separators=(",", ":")).encode("utf-8")
                f.write(data)
                offs.append(offs[-1] + len(data))
        np.save(offsets, np.asarray(offs, dtype=np.int64))
        return len(offs) - 1


class Catalogue:
    """A read-only catalogue directory (products, goals, search index)."""

    def __init__(self, path: str | Path):
        self.path = Path(path)
        try:
            self.meta = json.loads((self.path / "meta.json").read_text())
        except (OSError, json.JSONDecodeError) as exc:
            raise ValueError(f"{self.path}: not a WebShop catalogue ({exc})") from exc
        if self.meta.get("version") != STORE_VERSION:
            raise ValueError(
                f"{self.path}: catalogue format {self.meta.get('version')}, expected {STORE_VERSION}"
            )
        self._products = _Records(self.path / "products.bin", self.path / "products.npy")
        self._goals = _Records(self.path / "goals.bin", self.path / "goals.npy")
        self.index = BM25Index(self.path / "index")
        self.num_products = len(self._products)
        self.num_goals = len(self._goals)
        self.num_test = int(self.meta["num_test"])
        # A small per-process cache of decoded records (shared by the envs of the process).
        self.product = lru_cache(maxsize=1024)(self._products.__getitem__)
        self.goal = lru_cache(maxsize=256)(self._goals.__getitem__)

    def search(self, query: str, k: int = SEARCH_RETURN_N) -> list[int]:
        """Indices of the best ``k`` products for ``query``."""
        return self.index.search(query, k)

    def __repr__(self) -> str:
        return (
            f"Catalogue({str(self.path)!r}, products={self.num_products}, goals={self.num_goals})"
        )


def write_catalogue(
    path: str | Path,
    products: Iterable[dict[str, Any]],
    goals: Iterable[dict[str, Any]] | Callable[[int], Iterable[dict[str, Any]]],
    meta: dict[str, Any],
    test_size: int = 500,
) -> None:
    """Write a catalogue directory at ``path`` (atomically: built aside, then renamed).

    ``goals`` may be a function of the number of products written. The test split is the first
    ``min(test_size, num_goals // 2)`` goals.
    """
    path = Path(path)
    tmp = path.with_name(f".{path.name}.tmp-{os.getpid()}-{threading.get_ident()}")
    shutil.rmtree(tmp, ignore_errors=True)
    tmp.mkdir(parents=True)
    try:
        docs: list[str] = []
        asins: list[str] = []

        def collect(p: dict[str, Any]) -> None:
            docs.append(search_document(p))
            asins.append(p["asin"])

        n = _Records.write(products, tmp / "products.bin", tmp / "products.npy", collect)
        if n == 0:
            raise ValueError("a catalogue needs at least one product")
        goal_iter = goals(n) if callable(goals) else goals
        num_goals = _Records.write(goal_iter, tmp / "goals.bin", tmp / "goals.npy")
        if num_goals == 0:
            raise ValueError("a catalogue needs at least one goal (instruction)")
        (tmp / "index").mkdir()
        BM25Index.build(docs, asins, tmp / "index")
        meta = dict(
            meta,
            version=STORE_VERSION,
            num_products=n,
            num_goals=num_goals,
            num_test=min(int(test_size), num_goals // 2),
        )
        (tmp / "meta.json").write_text(json.dumps(meta, indent=1))
        if path.exists():
            shutil.rmtree(path)
        os.replace(tmp, path)
    finally:
        shutil.rmtree(tmp, ignore_errors=True)


_OPEN: dict[Path, Catalogue] = {}
_OPEN_LOCK = threading.Lock()


def open_catalogue(path: str | Path) -> Catalogue:
    """The process-wide :class:`Catalogue` for ``path`` (opened once per process)."""
    key = Path(path).resolve()
    with _OPEN_LOCK:
        cat = _OPEN.get(key)
        if cat is None:
            cat = _OPEN[key] = Catalogue(key)
        return cat


def ensure_catalogue(path: str | Path, build: Callable[[Path], None]) -> Catalogue:
    """Open the catalogue at ``path``, calling ``build(path)`` first (under a file lock, so one
    process builds while the others wait) when it does not exist yet or is stale."""
    path = Path(path)
    if not _ready(path):
        path.parent.mkdir(parents=True, exist_ok=True)
        with open(path.with_name(path.name + ".lock"), "w") as lock:
            fcntl.flock(lock, fcntl.LOCK_EX)
            try:
                if not _ready(path):
                    build(path)
            finally:
                fcntl.flock(lock, fcntl.LOCK_UN)
    return open_catalogue(path)


def _ready(path: Path) -> bool:
    try:
        return json.loads((path / "meta.json").read_text()).get("version") == STORE_VERSION
    except (OSError, json.JSONDecodeError):
        return False
