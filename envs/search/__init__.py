"""Search-augmented question answering (Search-R1 style): ``agentrl/Search-v0``.

Modules: ``answer`` (Search-R1's answer normalisation, exact match, F1), ``bm25`` (the BM25
engine: streaming build, memory-mapped index), ``corpus`` (passages, wiki-18 jsonl corpora and
their cached index), ``questions`` (Search-R1 / FlashRAG question files), ``world`` (the seeded
synthetic multi-hop world), ``retriever`` (local BM25, or a client of a Search-R1 retrieval
server), ``serve_retriever`` (such a server over a local index; extra ``serve``), ``env`` (the
Gymnasium env). See ``docs/envs/search.md``.
"""

from .answer import exact_match, f1_score, normalize_answer
from .bm25 import BM25Index, analyze
from .corpus import CorpusError, Passage, open_corpus
from .env import TOOLS, EmptyCorpusWarning, SearchEnv, parse_action
from .questions import Question, load_questions
from .retriever import Hit, HTTPRetriever, LocalRetriever, RetrievalError, world_retriever
from .world import KINDS, World, WorldSpec, generate_world

__all__ = [
    "EmptyCorpusWarning",
    "KINDS",
    "TOOLS",
    "BM25Index",
    "CorpusError",
    "HTTPRetriever",
    "Hit",
    "LocalRetriever",
    "Passage",
    "Question",
    "RetrievalError",
    "SearchEnv",
    "World",
    "WorldSpec",
    "analyze",
    "exact_match",
    "f1_score",
    "generate_world",
    "load_questions",
    "normalize_answer",
    "open_corpus",
    "parse_action",
    "world_retriever",
]
