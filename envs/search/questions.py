"""Question files in the formats Search-R1 and FlashRAG publish (jsonl or parquet).

One record per question with ``question`` (str) and ``golden_answers`` (a list of str, or one
str), optionally ``data_source`` (``nq``, ``hotpotqa``...; default: the file's stem), ``id`` and
``metadata``. Search-R1's processed parquet files keep those columns next to their own
(``prompt``, ``reward_model``...); where ``golden_answers`` is missing, Search-R1's
``reward_model.ground_truth.target`` is read instead. The category of a question is its data
source, followed by its hop count or type where the record has one (``hops``; FlashRAG's
``metadata.type``, e.g. HotpotQA's bridge/comparison; MuSiQue's ``2hop__...`` ids).

Parquet needs pyarrow (the ``search`` extra). A malformed record raises :class:`CorpusError`
naming the file and line (jsonl) or row (parquet).
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path
from typing import Any

from .corpus import CorpusError

__all__ = ["Question", "load_questions"]

_MUSIQUE_HOPS = re.compile(r"^(\d)hop")


@dataclass(frozen=True)
class Question:
    """A question, its golden answers and its category."""

    question: str
    golden_answers: tuple[str, ...]
    data_source: str
    category: str


def _records(path: Path) -> Iterator[tuple[str, Any]]:
    """``(where, record)`` for each record of a jsonl or parquet file."""
    if path.suffix == ".parquet":
        try:
            import pyarrow.parquet as pq  # optional: the search extra
        except ImportError as exc:
            raise CorpusError(
                f"{path}: reading parquet needs pyarrow: pip install 'agentrl[search]' ({exc})"
            ) from None
        try:
            rows = pq.read_table(path).to_pylist()
        except Exception as exc:  # noqa: BLE001 - pyarrow raises several types for a bad file
            raise CorpusError(f"{path}: not a readable parquet file ({exc})") from None
        for i, row in enumerate(rows):
            yield f"{path}: row {i}", row
        return
    with open(path, "rb") as f:
        for lineno, raw in enumerate(f, 1):
            if not raw.strip():
                continue
            try:
                yield f"{path}:{lineno}", json.loads(raw)
            except (json.JSONDecodeError, UnicodeDecodeError) as exc:
                raise CorpusError(f"{path}:{lineno}: not a JSON object ({exc})") from None


def _answers(record: dict, where: str) -> tuple[str, ...]:
    answers = record.get("golden_answers")
    if answers is None:
        target = ((record.get("reward_model") or {}).get("ground_truth") or {}).get("target")
        answers = target
    if answers is None:
        raise CorpusError(f"{where}: no 'golden_answers' (nor reward_model.ground_truth.target)")
    if isinstance(answers, str):
        answers = [answers]
    if not isinstance(answers, list | tuple) or not all(isinstance(a, str) for a in answers):
        raise CorpusError(f"{where}: 'golden_answers' must be a list of strings")
    if not any(a.strip() for a in answers):
        raise CorpusError(f"{where}: 'golden_answers' is empty")
    return tuple(answers)


def _category(record: dict, source: str) -> str:
    if isinstance(record.get("hops"), int):
        return f"{source}/{record['hops']}-hop"
    meta = record.get("metadata")
    if isinstance(meta, dict) and isinstance(meta.get("type"), str) and meta["type"]:
        return f"{source}/{meta['type']}"
    m = _MUSIQUE_HOPS.match(str(record.get("id", "")))
    return f"{source}/{m.group(1)}-hop" if m else source


def _parse(path: Path) -> tuple[Question, ...]:
    out = []
    for where, record in _records(path):
        if not isinstance(record, dict):
            raise CorpusError(f"{where}: not a JSON object")
        question = record.get("question")
        if not isinstance(question, str) or not question.strip():
            raise CorpusError(f"{where}: 'question' must be a non-empty string")
        source = record.get("data_source") or path.stem
        if not isinstance(source, str):
            raise CorpusError(f"{where}: 'data_source' must be a string")
        out.append(
            Question(question.strip(), _answers(record, where), source, _category(record, source))
        )
    if not out:
        raise CorpusError(f"{path}: no questions")
    return tuple(out)


@lru_cache(maxsize=8)
def _cached(path: str, size: int, mtime_ns: int) -> tuple[Question, ...]:
    return _parse(Path(path))


def load_questions(path: str | Path) -> tuple[Question, ...]:
    """The questions of a jsonl or parquet file, in file order (parsed once per process and file
    version: the envs of one worker share them)."""
    path = Path(path).expanduser()
    if not path.is_file():
        raise CorpusError(f"{path}: no such question file")
    st = path.stat()
    return _cached(str(path.resolve()), st.st_size, st.st_mtime_ns)
