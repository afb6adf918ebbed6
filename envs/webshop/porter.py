"""The Porter stemmer as Lucene 8's ``PorterStemFilter`` applies it (``PorterStemmer``).

Lucene's stemmer follows Martin Porter's own C/Java release of the algorithm (1980), not the
Snowball ``porter`` stemmer: it keeps the release's two departures from the paper (``-bli`` ->
``-ble`` instead of ``-abli`` -> ``-able``, and ``-logi`` -> ``-log``) and its "Bug 1/2" guards,
leaves words of one or two characters alone, and treats every character other than ``aeiou``
(and ``y`` after a vowel) as a consonant, non-ASCII letters included. Written from the
algorithm's description; it works on UTF-16 code units as Java does (see :func:`porter_stem`).
"""

from __future__ import annotations

from functools import lru_cache

__all__ = ["porter_stem"]

_VOWELS = frozenset("aeiou")


class _Stem:
    """One word being stemmed: ``b`` the characters, ``k`` the last index, ``j`` a mark."""

    __slots__ = ("b", "j", "k")

    def __init__(self, word: list[str]):
        self.b = word
        self.k = len(word) - 1
        self.j = 0

    def cons(self, i: int) -> bool:
        c = self.b[i]
        if c in _VOWELS:
            return False
        if c == "y":
            return True if i == 0 else not self.cons(i - 1)
        return True

    def m(self) -> int:
        """Number of vowel-consonant sequences in ``b[0..j]``."""
        n, i, j = 0, 0, self.j
        while True:
            if i > j:
                return n
            if not self.cons(i):
                break
            i += 1
        i += 1
        while True:
            while True:
                if i > j:
                    return n
                if self.cons(i):
                    break
                i += 1
            i += 1
            n += 1
            while True:
                if i > j:
                    return n
                if not self.cons(i):
                    break
                i += 1
            i += 1

    def vowel_in_stem(self) -> bool:
        return any(not self.cons(i) for i in range(self.j + 1))

    def doublec(self, j: int) -> bool:
        return j >= 1 and self.b[j] == self.b[j - 1] and self.cons(j)

    def cvc(self, i: int) -> bool:
        if i < 2 or not self.cons(i) or self.cons(i - 1) or not self.cons(i - 2):
            return False
        return self.b[i] not in "wxy"

    def ends(self, s: str) -> bool:
        n = len(s)
        o = self.k - n + 1
        if o < 0 or "".join(self.b[o : self.k + 1]) != s:
            return False
        self.j = self.k - n
        return True

    def setto(self, s: str) -> None:
        o = self.j + 1
        del self.b[o:]
        self.b.extend(s)
        self.k = self.j + len(s)

    def r(self, s: str) -> None:
        if self.m() > 0:
            self.setto(s)

    # The six steps, named as in Lucene's source (1ab, 1c, 2, 3, 4, 5 of the paper).
    def step1(self) -> None:
        b = self.b
        if b[self.k] == "s":
            if self.ends("sses"):
                self.k -= 2
            elif self.ends("ies"):
                self.setto("i")
            elif b[self.k - 1] != "s":
                self.k -= 1
        if self.ends("eed"):
            if self.m() > 0:
                self.k -= 1
        elif (self.ends("ed") or self.ends("ing")) and self.vowel_in_stem():
            self.k = self.j
            if self.ends("at"):
                self.setto("ate")
            elif self.ends("bl"):
                self.setto("ble")
            elif self.ends("iz"):
                self.setto("ize")
            elif self.doublec(self.k):
                ch = b[self.k]
                self.k -= 1
                if ch in "lsz":
                    self.k += 1
            elif self.m() == 1 and self.cvc(self.k):
                self.setto("e")

    def step2(self) -> None:
        if self.ends("y") and self.vowel_in_stem():
            self.b[self.k] = "i"

    _STEP3 = {
        "a": (("ational", "ate"), ("tional", "tion")),
        "c": (("enci", "ence"), ("anci", "ance")),
        "e": (("izer", "ize"),),
        "l": (("bli", "ble"), ("alli", "al"), ("entli", "ent"), ("eli", "e"), ("ousli", "ous")),
        "o": (("ization", "ize"), ("ation", "ate"), ("ator", "ate")),
        "s": (("alism", "al"), ("iveness", "ive"), ("fulness", "ful"), ("ousness", "ous")),
        "t": (("aliti", "al"), ("iviti", "ive"), ("biliti", "ble")),
        "g": (("logi", "log"),),
    }
    _STEP4 = {
        "e": (("icate", "ic"), ("ative", ""), ("alize", "al")),
        "i": (("iciti", "ic"),),
        "l": (("ical", "ic"), ("ful", "")),
        "s": (("ness", ""),),
    }
    _STEP5 = {
        "a": ("al",),
        "c": ("ance", "ence"),
        "e": ("er",),
        "i": ("ic",),
        "l": ("able", "ible"),
        "n": ("ant", "ement", "ment", "ent"),
        "s": ("ism",),
        "t": ("ate", "iti"),
        "u": ("ous",),
        "v": ("ive",),
        "z": ("ize",),
    }

    def step3(self) -> None:
        if self.k == 0:
            return
        for suffix, repl in self._STEP3.get(self.b[self.k - 1], ()):
            if self.ends(suffix):
                self.r(repl)
                return

    def step4(self) -> None:
        for suffix, repl in self._STEP4.get(self.b[self.k], ()):
            if self.ends(suffix):
                self.r(repl)
                return

    def step5(self) -> None:
        if self.k == 0:
            return
        c = self.b[self.k - 1]
        if c == "o":
            if not (
                (self.ends("ion") and self.j >= 0 and self.b[self.j] in "st") or self.ends("ou")
            ):
                return
        elif not any(self.ends(s) for s in self._STEP5.get(c, ())):
            return
        if self.m() > 1:
            self.k = self.j

    def step6(self) -> None:
        self.j = self.k
        if self.b[self.k] == "e":
            a = self.m()
            if a > 1 or (a == 1 and not self.cvc(self.k - 1)):
                self.k -= 1
        if self.b[self.k] == "l" and self.doublec(self.k) and self.m() > 1:
            self.k -= 1

    def run(self) -> str:
        if self.k > 1:
            self.step1()
            self.step2()
            self.step3()
            self.step4()
            self.step5()
            self.step6()
        return "".join(self.b[: self.k + 1])


@lru_cache(maxsize=1 << 18)
def porter_stem(word: str) -> str:
    """Lucene's Porter stem of ``word`` (expected lower-cased, as after ``LowerCaseFilter``)."""
    if word.isascii() or all(ord(c) < 0x10000 for c in word):
        return _Stem(list(word)).run()
    # Java strings are UTF-16: a character outside the BMP is two code units there.
    units = word.encode("utf-16-le")
    chars = [chr(int.from_bytes(units[i : i + 2], "little")) for i in range(0, len(units), 2)]
    stem = _Stem(chars).run()
    return stem.encode("utf-16-le", "surrogatepass").decode("utf-16-le")
