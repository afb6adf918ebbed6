"""A retrieval server with Search-R1's HTTP API over the local BM25 index (extra ``serve``).

    python -m agentrl.envs.search.serve_retriever --corpus wiki-18.jsonl --port 8000
    python -m agentrl.envs.search.serve_retriever --world num_entities=12 world_seed=0

``POST /retrieve`` takes ``{"queries": [str, ...], "topk": k, "return_scores": bool}`` (``topk``
null or missing: ``--topk``) and answers ``{"result": [...]}``, one list per query, best first:
``{"document": {"id", "title", "text", "contents"}, "score": float}`` items with
``return_scores``, bare documents without (as Search-R1's ``retrieval_server.py``). ``GET
/health`` answers ``{"passages": N}``. A malformed request gets HTTP 422 and a one-line reason.
Any client of Search-R1's server (its trainer, ``retriever=http`` here) can use it, and the env's
``retriever=http`` can use Search-R1's own (dense e5) servers instead of this one.

Built on Starlette and uvicorn (the ``serve`` extra); retrieval runs in Starlette's thread pool.
"""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence

import uvicorn
import yaml
from starlette.applications import Starlette
from starlette.concurrency import run_in_threadpool
from starlette.requests import Request
from starlette.responses import JSONResponse
from starlette.routing import Route

from .corpus import open_corpus
from .retriever import Hit, LocalRetriever, world_retriever
from .world import WorldSpec, generate_world

__all__ = ["create_app", "main"]

_WORLD_KEYS = {
    "num_entities": "num_entities",
    "attributes": "attributes",
    "relations": "relations",
    "distractors": "distractors",
    "names": "names",
    "world_seed": "seed",
}


def _document(hit: Hit) -> dict:
    p = hit.passage
    return {"id": p.id, "title": p.title, "text": p.text, "contents": p.contents}


def _problem(body) -> str | None:
    if not isinstance(body, dict):
        return "the body must be a JSON object"
    queries = body.get("queries")
    if not isinstance(queries, list) or not all(isinstance(q, str) for q in queries):
        return "'queries' must be a list of strings"
    topk = body.get("topk")
    if topk is not None and (isinstance(topk, bool) or not isinstance(topk, int) or topk < 1):
        return "'topk' must be an integer >= 1"
    if not isinstance(body.get("return_scores", False), bool):
        return "'return_scores' must be true or false"
    return None


def create_app(retriever: LocalRetriever, topk: int = 3) -> Starlette:
    """The ASGI app serving ``retriever`` (``topk``: the default when a request names none)."""

    async def retrieve(request: Request) -> JSONResponse:
        try:
            body = await request.json()
        except ValueError:
            return JSONResponse({"detail": "the body is not JSON"}, status_code=422)
        problem = _problem(body)
        if problem:
            return JSONResponse({"detail": problem}, status_code=422)
        k = body.get("topk") or topk
        results = await run_in_threadpool(retriever.retrieve, body["queries"], k)
        if body.get("return_scores", False):
            out = [[{"document": _document(h), "score": h.score} for h in hits] for hits in results]
        else:
            out = [[_document(h) for h in hits] for hits in results]
        return JSONResponse({"result": out})

    async def health(request: Request) -> JSONResponse:
        return JSONResponse({"passages": len(retriever.passages)})

    return Starlette(
        routes=[
            Route("/retrieve", retrieve, methods=["POST"]),
            Route("/health", health, methods=["GET"]),
        ]
    )


def _world_spec(pairs: Sequence[str]) -> WorldSpec:
    kwargs = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep or key not in _WORLD_KEYS:
            raise SystemExit(
                f"--world takes KEY=VALUE with KEY in {', '.join(_WORLD_KEYS)}, got {pair!r}"
            )
        parsed = yaml.safe_load(value)
        kwargs[_WORLD_KEYS[key]] = tuple(parsed) if isinstance(parsed, list) else parsed
    return WorldSpec(**kwargs)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(
        prog="python -m agentrl.envs.search.serve_retriever", description=__doc__.split("\n")[0]
    )
    src = ap.add_mutually_exclusive_group(required=True)
    src.add_argument("--corpus", help="wiki-18 style jsonl corpus (indexed once, cached)")
    src.add_argument(
        "--world", nargs="*", metavar="KEY=VALUE", help="serve a generated world (env kwargs)"
    )
    ap.add_argument("--host", default="127.0.0.1")
    ap.add_argument("--port", type=int, default=8000)
    ap.add_argument(
        "--topk", type=int, default=3, help="passages per query when a request names none"
    )
    ap.add_argument("--cache-dir", help="index cache folder (default: the agentrl cache)")
    args = ap.parse_args(argv)
    if args.corpus is not None:
        retriever = LocalRetriever(*open_corpus(args.corpus, cache_dir=args.cache_dir))
    else:
        retriever = world_retriever(generate_world(_world_spec(args.world)))
    print(
        f"serving {len(retriever.passages)} passages on http://{args.host}:{args.port}/retrieve",
        flush=True,
    )
    uvicorn.run(
        create_app(retriever, args.topk), host=args.host, port=args.port, log_level="warning"
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
