"""Retrievers: the local BM25 index, or a client of a server with Search-R1's retrieval API.

Search-R1's ``retrieval_server.py`` (and :mod:`agentrl.envs.search.serve_retriever`) answers
``POST /retrieve`` with JSON ``{"queries": [str, ...], "topk": k, "return_scores": true}`` by
``{"result": [[{"document": {...}, "score": float}, ...], ...]}``: one list per query, best
first. A document has ``contents`` (``"title"\\ntext``); Search-R1's BM25 server adds ``title``
and ``text``, its dense (e5) server returns the corpus row (``id``, ``contents``). A document
without ``id`` is identified by a hash of its contents (the env's ``state_key`` needs ids).
"""

from __future__ import annotations

import hashlib
import json
import time
import urllib.error
import urllib.request
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Protocol

from .bm25 import BM25Index
from .corpus import Passage, PassageList, split_contents
from .world import World

__all__ = [
    "HTTPRetriever",
    "Hit",
    "LocalRetriever",
    "RetrievalError",
    "Retriever",
    "world_retriever",
]


class RetrievalError(RuntimeError):
    """The retrieval server could not be reached or answered something else than its API."""


@dataclass(frozen=True)
class Hit:
    """One retrieved passage and its score."""

    passage: Passage
    score: float


class Retriever(Protocol):
    def retrieve(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        """The best ``k`` passages per query, best first."""
        ...


class LocalRetriever:
    """BM25 over a local corpus: ``index`` numbers the passages of ``passages``."""

    def __init__(self, index: BM25Index, passages: Sequence[Passage]):
        if index.num_docs != len(passages):
            raise ValueError(f"index of {index.num_docs} passages for {len(passages)} passages")
        self.index, self.passages = index, passages

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        out = []
        for query in queries:
            docs, scores = self.index.search(query, k)
            out.append([Hit(self.passages[int(d)], float(s)) for d, s in zip(docs, scores)])
        return out


def world_retriever(world: World) -> LocalRetriever:
    """BM25 over the passages of a generated world (built in memory: a few milliseconds)."""
    index = BM25Index.build(p.contents for p in world.passages)
    return LocalRetriever(index, PassageList(world.passages))


def _document_passage(doc: dict) -> Passage:
    contents = doc.get("contents")
    if not isinstance(contents, str):
        title, text = doc.get("title"), doc.get("text")
        if not isinstance(title, str) or not isinstance(text, str):
            raise RetrievalError(
                f"a document without 'contents' (nor title and text): {doc!r:.200}"
            )
        contents = f'"{title}"\n{text}'
    pid = doc.get("id")
    if pid is None:
        pid = "sha1:" + hashlib.sha1(contents.encode("utf-8")).hexdigest()[:16]
    title, text = split_contents(contents)
    return Passage(str(pid), title, text, contents)


class HTTPRetriever:
    """A client of a retrieval server with Search-R1's API at ``url`` (e.g.
    ``http://127.0.0.1:8000/retrieve``); ``retries`` more tries after a connection failure."""

    def __init__(self, url: str, *, timeout: float = 30.0, retries: int = 2):
        if not url.startswith(("http://", "https://")):
            raise ValueError(f"retriever_url must be an http(s) URL, got {url!r}")
        self.url, self.timeout, self.retries = url, timeout, retries

    def _post(self, payload: dict) -> dict:
        body = json.dumps(payload).encode("utf-8")
        request = urllib.request.Request(
            self.url, data=body, headers={"Content-Type": "application/json"}, method="POST"
        )
        for attempt in range(self.retries + 1):
            try:
                with urllib.request.urlopen(request, timeout=self.timeout) as response:
                    return json.loads(response.read())
            except urllib.error.HTTPError as exc:  # the server answered: retrying will not help
                detail = exc.read()[:300].decode("utf-8", "replace")
                raise RetrievalError(f"{self.url}: HTTP {exc.code}: {detail}") from None
            except (urllib.error.URLError, TimeoutError, ConnectionError) as exc:
                if attempt == self.retries:
                    raise RetrievalError(
                        f"{self.url}: no answer after {self.retries + 1} tries ({exc})"
                    ) from None
                time.sleep(0.2 * 2**attempt)
            except json.JSONDecodeError as exc:
                raise RetrievalError(f"{self.url}: the answer is not JSON ({exc})") from None
        raise AssertionError("unreachable")

    def retrieve(self, queries: Sequence[str], k: int) -> list[list[Hit]]:
        data = self._post({"queries": list(queries), "topk": k, "return_scores": True})
        result = data.get("result") if isinstance(data, dict) else None
        if not isinstance(result, list) or len(result) != len(queries):
            raise RetrievalError(
                f"{self.url}: expected {{'result': [one list per query]}} for {len(queries)} "
                f"queries, got {str(data)[:200]}"
            )
        out = []
        for hits in result:
            row = []
            for item in hits[:k]:
                if not isinstance(item, dict) or not isinstance(item.get("document"), dict):
                    raise RetrievalError(
                        f"{self.url}: a hit is not {{'document', 'score'}}: {item!r:.200}"
                    )
                row.append(Hit(_document_passage(item["document"]), float(item.get("score", 0.0))))
            out.append(row)
        return out
