"""Answer scoring: exact match under Search-R1's normalisation, and token F1.

:func:`normalize_answer` is the normalisation of Search-R1's ``qa_em`` reward (the SQuAD one):
lowercase, drop ASCII punctuation, replace the articles *a*, *an*, *the* by a space, collapse
whitespace, in that order. :func:`exact_match` is 1.0 when the normalised prediction equals any
normalised golden answer. :func:`f1_score` is the SQuAD token F1 on the same normalisation
(maximum over the golden answers), with FlashRAG's rule that *yes*/*no*/*noanswer* only match
themselves.
"""

from __future__ import annotations

import re
import string
from collections import Counter
from collections.abc import Sequence

__all__ = ["exact_match", "f1_score", "normalize_answer"]

_ARTICLES = re.compile(r"\b(a|an|the)\b")
_PUNCTUATION = str.maketrans("", "", string.punctuation)
_SPECIAL = frozenset({"yes", "no", "noanswer"})


def normalize_answer(text: str) -> str:
    """Search-R1's (SQuAD's) answer normalisation."""
    text = text.lower().translate(_PUNCTUATION)
    return " ".join(_ARTICLES.sub(" ", text).split())


def _golden(golden_answers: str | Sequence[str]) -> list[str]:
    return [golden_answers] if isinstance(golden_answers, str) else list(golden_answers)


def exact_match(prediction: str, golden_answers: str | Sequence[str]) -> float:
    """1.0 when the normalised ``prediction`` equals a normalised golden answer, else 0.0."""
    pred = normalize_answer(prediction)
    return float(any(pred == normalize_answer(g) for g in _golden(golden_answers)))


def _f1(pred: str, gold: str) -> float:
    if (pred in _SPECIAL or gold in _SPECIAL) and pred != gold:
        return 0.0
    p, g = pred.split(), gold.split()
    common = sum((Counter(p) & Counter(g)).values())
    if common == 0:
        return 0.0
    precision, recall = common / len(p), common / len(g)
    return 2 * precision * recall / (precision + recall)


def f1_score(prediction: str, golden_answers: str | Sequence[str]) -> float:
    """Token F1 of the normalised ``prediction`` against the best golden answer, in [0, 1]."""
    pred = normalize_answer(prediction)
    return max((_f1(pred, normalize_answer(g)) for g in _golden(golden_answers)), default=0.0)
