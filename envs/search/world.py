"""A seeded synthetic multi-hop world: entities, numeric attributes, relations, passages, questions.

Nothing is downloaded. Every entity has one value per attribute (a number) and one other entity
per relation (distinct targets). Its *profile* passage states all of them
(``"K"\\nK: age 7; size 3; boss M; friend Q.``); *distractor* passages mention an entity next to a
fact about another one (``"Meeting"\\nK once met Q, whose age is 5.``), so a search for K also
returns values that answer nothing about K. Profiles name their entity twice (title and text)
and every other passage names it at most once, so BM25 ranks an entity's profile first for a
search of its name.

Question kinds (``KINDS``), each answered by searching the entities of its chain in order:

- ``1-hop``: ``What is the age of K?`` / ``Who is the boss of K?``
- ``2-hop``: ``What is the age of the boss of K?`` / ``Who is the friend of the boss of K?``
- ``3-hop``: ``What is the age of the friend of the boss of K?``
- ``comparison``: ``Who has the larger age, K or M?`` (the two values differ)

Chains never visit an entity twice. Names: ``letters`` (single capitals B-Z, values 1-9: one
token each for the embedded model's tokenizer, so ``search[K]`` fits its 8-token response budget)
or ``words`` (invented two-syllable names, values 10-99: for real LLMs).
"""

from __future__ import annotations

import itertools
import string
from dataclasses import dataclass, field

import numpy as np

from .corpus import Passage

__all__ = ["KINDS", "SyntheticQuestion", "World", "WorldSpec", "generate_world"]

KINDS = ("1-hop", "2-hop", "3-hop", "comparison")
NAME_SCHEMES = ("letters", "words")
#: ``a`` is a stop word of the index (it would never be searchable).
LETTERS = tuple(c for c in string.ascii_uppercase if c != "A")
_ONSETS = tuple("bdfgklmnprstvz")
_VOWELS = tuple("aeiou")
_CODAS = ("", "", "n", "r", "l", "s")


@dataclass(frozen=True)
class WorldSpec:
    """The generator's settings (the world is a pure function of them)."""

    num_entities: int = 12
    attributes: tuple[str, ...] = ("age", "size")
    relations: tuple[str, ...] = ("boss", "friend")
    distractors: int = 1
    names: str = "letters"
    seed: int = 0

    def __post_init__(self) -> None:
        if self.names not in NAME_SCHEMES:
            raise ValueError(f"names must be one of {', '.join(NAME_SCHEMES)}, got {self.names!r}")
        high = len(LETTERS) if self.names == "letters" else 500
        if not 3 <= self.num_entities <= high:
            raise ValueError(
                f"num_entities must lie in [3, {high}] with names={self.names!r}, got {self.num_entities}"
            )
        if not self.attributes:
            raise ValueError("the world needs at least one attribute")
        if len(self.relations) > self.num_entities - 1:
            raise ValueError("more relations than other entities to point to")
        words = [*self.attributes, *self.relations]
        if len(set(words)) != len(words) or not all(w.isalpha() and w.islower() for w in words):
            raise ValueError(
                f"attribute and relation names must be distinct lowercase words: {words}"
            )
        if self.distractors < 0:
            raise ValueError(f"distractors must be >= 0, got {self.distractors}")


@dataclass(frozen=True)
class SyntheticQuestion:
    """A generated question: its text, answer, kind and the entities an expert searches."""

    text: str
    answer: str
    kind: str
    chain: tuple[str, ...]


@dataclass(frozen=True)
class World:
    """Entities, their facts, the passages that state them and every question they answer."""

    spec: WorldSpec
    entities: tuple[str, ...]
    values: dict[tuple[str, str], str]
    links: dict[tuple[str, str], str]
    passages: tuple[Passage, ...]
    profile: dict[str, str]  # entity -> id of its profile passage
    questions: dict[str, tuple[SyntheticQuestion, ...]] = field(repr=False)
    known: frozenset[str] = field(repr=False, default=frozenset())  # entity names and values

    def mentions(self, text: str) -> list[str]:
        """Entity names and values in ``text``, in order of appearance (with repeats)."""
        return [w for w in _words(text) if w in self.known]


def _words(text: str) -> list[str]:
    out, cur = [], []
    for ch in text:
        if ch.isalnum():
            cur.append(ch)
        elif cur:
            out.append("".join(cur))
            cur = []
    if cur:
        out.append("".join(cur))
    return out


def _names(spec: WorldSpec, rng: np.random.Generator) -> list[str]:
    if spec.names == "letters":
        picks = rng.choice(len(LETTERS), size=spec.num_entities, replace=False)
        return [LETTERS[i] for i in sorted(picks)]
    seen: set[str] = set()
    out = []
    while len(out) < spec.num_entities:
        syllables = [
            _ONSETS[rng.integers(len(_ONSETS))]
            + _VOWELS[rng.integers(len(_VOWELS))]
            + _CODAS[rng.integers(len(_CODAS))]
            for _ in range(2)
        ]
        name = "".join(syllables).capitalize()
        if name not in seen and name.lower() not in {"boss", "friend"}:
            seen.add(name)
            out.append(name)
    return out


def generate_world(spec: WorldSpec) -> World:
    """The world of ``spec`` (same spec, same world, in any process)."""
    rng = np.random.default_rng([spec.seed, 20_26])
    entities = _names(spec, rng)
    lo, hi = (1, 10) if spec.names == "letters" else (10, 100)
    values = {(e, a): str(int(rng.integers(lo, hi))) for e in entities for a in spec.attributes}
    links: dict[tuple[str, str], str] = {}
    for i, e in enumerate(entities):
        others = [j for j in range(len(entities)) if j != i]
        targets = rng.choice(others, size=len(spec.relations), replace=False)
        for r, j in zip(spec.relations, targets):
            links[(e, r)] = entities[int(j)]

    passages: list[Passage] = []
    profile: dict[str, str] = {}
    for e in entities:
        facts = [f"{a} {values[(e, a)]}" for a in spec.attributes]
        facts += [f"{r} {links[(e, r)]}" for r in spec.relations]
        pid = str(len(passages))
        profile[e] = pid
        passages.append(Passage.from_contents(pid, f'"{e}"\n{e}: {"; ".join(facts)}.'))
    for e in entities:
        related = {links[(e, r)] for r in spec.relations}
        pool = [f for f in entities if f != e and f not in related] or [
            f for f in entities if f != e
        ]
        for _ in range(spec.distractors):
            f = pool[int(rng.integers(len(pool)))]
            a = spec.attributes[int(rng.integers(len(spec.attributes)))]
            text = f"{e} once met {f}, whose {a} is {values[(f, a)]}."
            passages.append(Passage.from_contents(str(len(passages)), f'"Meeting"\n{text}'))
    questions = _questions(spec, entities, values, links)
    known = frozenset(entities) | frozenset(values.values())
    return World(spec, tuple(entities), values, links, tuple(passages), profile, questions, known)


def _questions(spec, entities, values, links) -> dict[str, tuple[SyntheticQuestion, ...]]:
    attrs, rels = spec.attributes, spec.relations
    one, two, three, comp = [], [], [], []
    for e in entities:
        for a in attrs:
            one.append(SyntheticQuestion(f"What is the {a} of {e}?", values[(e, a)], "1-hop", (e,)))
        for r in rels:
            one.append(SyntheticQuestion(f"Who is the {r} of {e}?", links[(e, r)], "1-hop", (e,)))
        for r1 in rels:
            m = links[(e, r1)]
            for a in attrs:
                text = f"What is the {a} of the {r1} of {e}?"
                two.append(SyntheticQuestion(text, values[(m, a)], "2-hop", (e, m)))
            for r2 in rels:
                if links[(m, r2)] == e:
                    continue
                text = f"Who is the {r2} of the {r1} of {e}?"
                two.append(SyntheticQuestion(text, links[(m, r2)], "2-hop", (e, m)))
            for r2 in rels:
                n = links[(m, r2)]
                if n == e:
                    continue
                for a in attrs:
                    text = f"What is the {a} of the {r2} of the {r1} of {e}?"
                    three.append(SyntheticQuestion(text, values[(n, a)], "3-hop", (e, m, n)))
    for e1, e2 in itertools.combinations(entities, 2):
        for a in attrs:
            v1, v2 = int(values[(e1, a)]), int(values[(e2, a)])
            if v1 != v2:
                text = f"Who has the larger {a}, {e1} or {e2}?"
                comp.append(SyntheticQuestion(text, e1 if v1 > v2 else e2, "comparison", (e1, e2)))
    return {
        "1-hop": tuple(one),
        "2-hop": tuple(two),
        "3-hop": tuple(three),
        "comparison": tuple(comp),
    }
