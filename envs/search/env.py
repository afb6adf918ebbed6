"""``agentrl/Search-v0``: multi-turn question answering with a search engine (Search-R1 style).

Each episode is one question. Actions are text commands: ``search[query]`` returns the top-k
passages (``topk``, default 3), ``answer[text]`` ends the episode; anything else is invalid
(``action_valid=False``, the state unchanged, the turn spent). The episode is cut after
``max_turns`` actions; with ``final_answer=True`` the last of them must be an answer (only
``answer[...]`` is listed, a search there is invalid), as Search-R1's rollout ends with an answer
round that runs no search. The same two commands are declared as OpenAI-style function tools in the
reset info (``info["tools"]``; ``info["tool_actions"]`` maps a call to its text command).

Reward on ``answer``: exact match under Search-R1's normalisation against any golden answer
(``reward="em"``) or token F1 (``"f1"``); ``format_reward`` is given instead of 0 to a wrong
answer closing an episode whose every action was well-formed. ``info["won"]`` is the exact match,
``info["score"]`` the F1.

Observation: the question, then the passages retrieved so far (``observation="all"``, each once,
in the order first retrieved: the observation is the whole state) or those of the last search
only (``"latest"``, as Search-R1's ``<information>`` blocks), as ``Doc i(Title: t) text``.

``state_key`` (step-level credit groups): ``"retrieved"`` (default) keys a state by the task and
the sorted set of passage ids retrieved so far: two rollouts of one question that have seen the
same passages are in the same state, whatever the order of their searches. ``"last"`` keys it by
the ids of the last search's results in rank order (the question before any search), as
verl-agent's GiGPO search setting groups steps by their last observation.

Data: a generated world (:mod:`.world`, the default) or question files with a wiki-18 corpus
(``train_file``/``test_file``, ``corpus_file``; :mod:`.questions`, :mod:`.corpus`). Retrieval:
the local BM25 index (``retriever="bm25"``) or a server with Search-R1's API
(``retriever="http"``, ``retriever_url``). Admissible actions (for constrained decoding): searches
for the entities named in the question and the passages (generated world) or for the question and
the passages' titles (files), and answers among the entities and values of the last results and
the question's entities (or the last results' titles); at most ``max_search_actions`` +
``max_answer_actions``. Free-form commands stay valid.
"""

from __future__ import annotations

import re
import unicodedata
import warnings
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from ..base import TextEnv, make_info
from .answer import exact_match, f1_score
from .corpus import Passage, open_corpus
from .questions import load_questions
from .retriever import HTTPRetriever, LocalRetriever, Retriever, world_retriever
from .world import KINDS, World, WorldSpec, generate_world

__all__ = ["TOOLS", "EmptyCorpusWarning", "SearchEnv", "parse_action"]


class EmptyCorpusWarning(UserWarning):
    """A corpus file with no passage: every search answers that no passage matches."""


_ACTION = re.compile(r"^\s*(search|answer)\s*\[(.*)\]\s*$", re.DOTALL | re.IGNORECASE)

#: The two commands as OpenAI function tools (``info["tools"]`` on reset).
TOOLS: tuple[dict[str, Any], ...] = (
    {
        "type": "function",
        "function": {
            "name": "search",
            "description": "Search the corpus; returns the best passages for the query.",
            "parameters": {
                "type": "object",
                "properties": {"query": {"type": "string", "description": "the search query"}},
                "required": ["query"],
                "additionalProperties": False,
            },
        },
    },
    {
        "type": "function",
        "function": {
            "name": "answer",
            "description": "Give the final answer (a few words); ends the episode.",
            "parameters": {
                "type": "object",
                "properties": {"text": {"type": "string", "description": "the answer"}},
                "required": ["text"],
                "additionalProperties": False,
            },
        },
    },
)
#: How a tool call becomes the text command (``info["tool_actions"]``).
TOOL_ACTIONS = {"search": "search[{query}]", "answer": "answer[{text}]"}


def parse_action(action: str, max_chars: int) -> tuple[str, str] | str:
    """``(command, argument)`` of ``search[...]``/``answer[...]``, or why the action is invalid."""
    if not isinstance(action, str):
        return "not a string"
    m = _ACTION.match(action)
    if not m:
        return "not a command: use search[query] or answer[text]"
    command, argument = m.group(1).lower(), " ".join(m.group(2).split())
    if not argument:
        return f"empty {command}"
    if len(argument) > max_chars:
        return f"{command} longer than {max_chars} characters"
    if any(unicodedata.category(ch) in ("Cc", "Cs") for ch in argument):
        return f"control characters in the {command}"
    return command, argument


@dataclass(frozen=True)
class _Task:
    task_id: str
    question: str
    answers: tuple[str, ...]
    category: str
    data_source: str
    chain: tuple[str, ...] | None  # generated world: the entities an expert searches


def _dedupe(items) -> list[str]:
    return list(dict.fromkeys(items))


class SearchEnv(TextEnv):
    """Question answering by search; see the module docstring."""

    def __init__(
        self,
        *,
        train_file: str | None = None,
        test_file: str | None = None,
        corpus_file: str | None = None,
        retriever: str = "bm25",
        retriever_url: str | None = None,
        retriever_timeout: float = 30.0,
        topk: int = 3,
        max_turns: int = 4,
        reward: str = "em",
        format_reward: float = 0.0,
        final_answer: bool = False,
        observation: str = "all",
        state_key: str = "retrieved",
        num_entities: int = 12,
        attributes: Sequence[str] = ("age", "size"),
        relations: Sequence[str] = ("boss", "friend"),
        distractors: int = 1,
        names: str = "letters",
        world_seed: int = 0,
        question_types: Sequence[str] = KINDS,
        test_fraction: float = 0.2,
        max_search_actions: int = 5,
        max_answer_actions: int = 6,
        max_action_chars: int = 300,
        cache_dir: str | None = None,
        render_mode: str | None = None,
    ):
        super().__init__(render_mode)
        checks = {
            "retriever": (retriever, ("bm25", "http")),
            "reward": (reward, ("em", "f1")),
            "observation": (observation, ("all", "latest")),
            "state_key": (state_key, ("retrieved", "last")),
        }
        for key, (value, allowed) in checks.items():
            if value not in allowed:
                raise ValueError(f"{key} must be one of {', '.join(allowed)}, got {value!r}")
        for key, value in (("topk", topk), ("max_turns", max_turns)):
            if not isinstance(value, int) or value < 1:
                raise ValueError(f"{key} must be an integer >= 1, got {value!r}")
        if not 0.0 <= format_reward < 1.0:
            raise ValueError(f"format_reward must lie in [0, 1), got {format_reward}")
        self.topk, self.max_turns, self.reward_kind = topk, max_turns, reward
        self.format_reward = format_reward
        self.final_answer = bool(final_answer)
        self.observation_mode, self.key_mode = observation, state_key
        self.max_search, self.max_answer = max_search_actions, max_answer_actions
        self.max_chars = max_action_chars
        self.world: World | None = None
        self._splits: dict[str, list[str]] = {}
        self._tasks: dict[str, _Task] = {}
        if train_file is None and test_file is None:
            self._init_world(
                WorldSpec(
                    num_entities=num_entities,
                    attributes=tuple(attributes),
                    relations=tuple(relations),
                    distractors=distractors,
                    names=names,
                    seed=world_seed,
                ),
                tuple(question_types),
                test_fraction,
            )
        else:
            self._init_files(train_file, test_file)
        self.retriever = self._make_retriever(
            retriever, retriever_url, retriever_timeout, corpus_file, cache_dir
        )
        self._task: _Task | None = None
        self._clear()

    # -- data ------------------------------------------------------------------------------------
    def _init_world(self, spec: WorldSpec, kinds: tuple[str, ...], test_fraction: float) -> None:
        unknown = [k for k in kinds if k not in KINDS]
        if unknown or not kinds:
            raise ValueError(f"question_types must be among {', '.join(KINDS)}, got {list(kinds)}")
        if not 0.0 < test_fraction < 1.0:
            raise ValueError(f"test_fraction must lie in (0, 1), got {test_fraction}")
        self.world = world = generate_world(spec)
        self._kinds = kinds
        per_split: dict[str, dict[str, list[str]]] = {"train": {}, "test": {}}
        for kind in kinds:
            qs = world.questions[kind]
            if len(qs) < 2:
                raise ValueError(f"the world has {len(qs)} {kind} questions; use more entities")
            order = np.random.default_rng([spec.seed, 7, KINDS.index(kind)]).permutation(len(qs))
            n_test = max(1, round(test_fraction * len(qs)))
            for i in order:
                q = qs[int(i)]
                tid = f"{kind}/{int(i)}"
                self._tasks[tid] = _Task(
                    tid, q.text, (q.answer,), f"synthetic/{kind}", "synthetic", q.chain
                )
            per_split["test"][kind] = [f"{kind}/{int(i)}" for i in order[:n_test]]
            per_split["train"][kind] = [f"{kind}/{int(i)}" for i in order[n_test:]]
        self._by_kind = per_split["train"]
        for split, groups in per_split.items():  # round robin over kinds: balanced prefixes
            longest = max(len(g) for g in groups.values())
            self._splits[split] = [
                groups[k][j] for j in range(longest) for k in kinds if j < len(groups[k])
            ]

    def _init_files(self, train_file: str | None, test_file: str | None) -> None:
        self._kinds = ()
        self._by_kind = {}
        for split, path in (("train", train_file), ("test", test_file)):
            if path is None:
                continue
            ids = []
            for i, q in enumerate(load_questions(path)):
                tid = f"{split}/{i}"
                ids.append(tid)
                self._tasks[tid] = _Task(
                    tid, q.question, q.golden_answers, q.category, q.data_source, None
                )
            self._splits[split] = ids

    def _make_retriever(self, kind, url, timeout, corpus_file, cache_dir) -> Retriever:
        if kind == "http":
            if not url:
                raise ValueError(
                    "retriever=http needs retriever_url (e.g. http://127.0.0.1:8000/retrieve)"
                )
            return HTTPRetriever(url, timeout=timeout)
        if self.world is not None:
            if corpus_file is not None:
                raise ValueError("corpus_file needs question files (train_file or test_file)")
            return world_retriever(self.world)
        if corpus_file is None:
            raise ValueError(
                "question files need corpus_file (a wiki-18 style jsonl) or retriever=http"
            )
        index, passages = open_corpus(corpus_file, cache_dir=cache_dir)
        if len(passages) == 0:
            warnings.warn(
                f"Search-v0: corpus_file {corpus_file} holds no passages: every search will "
                "answer that no passage matches (give a wiki-18 style jsonl: one "
                '{"id", "contents"} object per line)',
                EmptyCorpusWarning,
                stacklevel=2,
            )
        return LocalRetriever(index, passages)

    def task_ids(self, split: str, limit: int | None = None) -> list[str]:
        if split not in self._splits:
            raise ValueError(f"unknown split {split!r}; this env has {', '.join(self._splits)}")
        return self._splits[split][:limit]

    # -- episode ---------------------------------------------------------------------------------
    def _clear(self) -> None:
        self.retrieved: dict[str, Passage] = {}
        self.last_hits: list[Passage] = []
        self.searched: set[str] = set()
        self.turns, self.done, self.all_valid = 0, False, True
        self.answer: str | None = None
        self.note = ""

    def _draw(self) -> _Task:
        rng = self.np_random
        if self._by_kind:  # the generated world: a kind, then a question of it
            kind = self._kinds[int(rng.integers(len(self._kinds)))]
            ids = self._by_kind[kind]
        else:
            ids = self._splits.get("train") or self._splits["test"]
        return self._tasks[ids[int(rng.integers(len(ids)))]]

    def reset(self, *, seed: int | None = None, options: dict | None = None):
        super().reset(seed=seed)
        task_id = (options or {}).get("task_id")
        if task_id is not None:
            if task_id not in self._tasks:
                raise ValueError(f"unknown task_id {task_id!r} (see task_ids('train'/'test'))")
            self._task = self._tasks[task_id]
        else:
            self._task = self._draw()
        self._clear()
        info = self._info(True, won=False, score=0.0)
        info["tools"] = [dict(t) for t in TOOLS]
        info["tool_actions"] = dict(TOOL_ACTIONS)
        return self.current_observation(), info

    def step(self, action: str):
        assert self._task is not None, "call reset() first"
        if self.done:
            self.note = "The episode is over."
            return self.current_observation(), 0.0, True, False, self._info(False, **self._end())
        self.turns += 1
        parsed = parse_action(action, self.max_chars)
        reward, valid = 0.0, True
        if isinstance(parsed, str):
            valid, self.all_valid = False, False
            self.note = f"Invalid action ({parsed})."
        elif parsed[0] == "search" and self._answer_only(self.turns):
            valid, self.all_valid = False, False
            self.note = "Invalid action (the last turn takes an answer[...], not a search)."
        elif parsed[0] == "search":
            self._search(parsed[1])
        else:
            self.done, self.answer, self.note = True, parsed[1], ""
            reward = self._reward()
        truncated = not self.done and self.turns >= self.max_turns
        extra = self._end() if self.done else {"won": False, "score": 0.0}
        return self.current_observation(), reward, self.done, truncated, self._info(valid, **extra)

    def _answer_only(self, turn: int) -> bool:
        """Whether turn number ``turn`` (1-based) takes only an answer: ``final_answer``, the last
        allowed turn, and an answer to list (question files with nothing retrieved yet offer
        none, so that turn keeps its searches, listed and valid)."""
        return self.final_answer and turn >= self.max_turns and bool(self._choices()[1])

    def _search(self, query: str) -> None:
        hits = self.retriever.retrieve([query], self.topk)[0]
        self.searched.add(query.lower())
        self.last_hits = [h.passage for h in hits]
        for p in self.last_hits:
            self.retrieved.setdefault(p.id, p)
        self.note = "" if hits else f"No passage matches {query!r}."

    def _reward(self) -> float:
        assert self._task is not None and self.answer is not None
        base = exact_match(self.answer, self._task.answers)
        if self.reward_kind == "f1":
            base = f1_score(self.answer, self._task.answers)
        return base if base > 0 or not self.all_valid else self.format_reward

    def _end(self) -> dict[str, Any]:
        assert self._task is not None
        if self.answer is None:
            return {"won": False, "score": 0.0}
        return {
            "won": exact_match(self.answer, self._task.answers) == 1.0,
            "score": f1_score(self.answer, self._task.answers),
            "answer": self.answer,
        }

    # -- views -----------------------------------------------------------------------------------
    def current_observation(self) -> str:
        assert self._task is not None, "call reset() first"
        lines = [f"Question: {self._task.question}"]
        docs = list(self.retrieved.values()) if self.observation_mode == "all" else self.last_hits
        lines += [f"Doc {i}(Title: {p.title}) {p.text}" for i, p in enumerate(docs, 1)]
        if self.answer is not None:
            lines.append(f"Answer: {self.answer}")
        if self.note:
            lines.append(self.note)
        return "\n".join(lines)

    def state_key(self) -> str:
        assert self._task is not None
        if self.key_mode == "retrieved":
            ids = sorted(self.retrieved)
        else:
            ids = [p.id for p in self.last_hits]
        key = f"{self._task.task_id}|{','.join(ids)}"
        return key + ("|answered" if self.answer is not None else "")

    def admissible_actions(self) -> list[str]:
        """The listed commands now (see the module docstring); empty once the episode is over."""
        if self.done:
            return []
        searches, answers = self._choices()
        if self._answer_only(self.turns + 1):
            searches = []
        return [f"search[{s}]" for s in searches] + [f"answer[{a}]" for a in answers]

    def _choices(self) -> tuple[list[str], list[str]]:
        """The search queries and answers the state offers (capped, answers sorted)."""
        task = self._task
        assert task is not None
        if self.world is not None:
            asked = [w for w in self.world.mentions(task.question) if w in self.world.profile]
            latest = [w for p in self.last_hits for w in self.world.mentions(p.text)]
            seen = [w for p in self.retrieved.values() for w in self.world.mentions(p.text)]
            searches = [w for w in _dedupe(asked + latest + seen) if w in self.world.profile]
            answers = _dedupe(asked + latest)
        else:
            latest = [p.title for p in self.last_hits if p.title]
            seen = [p.title for p in self.retrieved.values() if p.title]
            searches, answers = _dedupe([task.question, *latest, *seen]), _dedupe(latest)
        searches = [s for s in searches if s.lower() not in self.searched][: self.max_search]
        return searches, sorted(answers[: self.max_answer])

    def expert_action(self) -> str:
        """Gold retrieval, then the answer: search each entity of the question's chain in turn
        (generated world; each one's profile is its first result, so the answer is among the
        last results; with files: search the question once), then answer the first golden
        answer."""
        task = self._task
        assert task is not None, "call reset() first"
        if not self._answer_only(self.turns + 1):
            if task.chain is not None:
                for entity in task.chain:
                    if entity.lower() not in self.searched:
                        return f"search[{entity}]"
            elif not self.searched:
                return f"search[{task.question}]"
        return f"answer[{task.answers[0]}]"

    def _info(self, valid: bool, *, won: bool, score: float, answer: str | None = None):
        task = self._task
        assert task is not None
        extra: dict[str, Any] = {"data_source": task.data_source, "turns": self.turns}
        if answer is not None:
            extra["answer"] = answer
        return make_info(
            instruction=(
                f"Answer the question by searching a corpus. search[query] returns the top "
                f"{self.topk} passages; answer[text] gives your final answer (a few words) and "
                f"ends the episode. Question: {task.question}"
            ),
            task_id=task.task_id,
            category=task.category,
            admissible_actions=self.admissible_actions(),
            state_key=self.state_key(),
            action_valid=valid,
            won=won,
            score=score,
            milestones=(),
            **extra,
        )
