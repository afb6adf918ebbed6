"""Case-insensitive command matching that never folds a look-alike letter onto ASCII.

Python's Unicode case rules map some non-ASCII characters onto ASCII letters: ``"K".lower()``
(the Kelvin sign) is ``"k"``, ``"ſ".upper()`` is ``"S"``, ``"ı".upper()`` is ``"I"``, and a
pattern compiled with ``re.IGNORECASE`` (without ``re.ASCII``) matches ``"ı"``, ``"ſ"`` and
``"K"`` against ``i``, ``s`` and ``k``. An action typed with such a character is not the command
it resembles: it must be invalid, not a move or a purchase. Envs match their verbs and directions
with ASCII-only patterns (``(?ai:...)`` groups) and lower-case the rest with
:func:`command_lower`.
"""

from __future__ import annotations

import string

__all__ = ["ascii_lower", "ascii_upper", "command_lower"]

_LOWER = str.maketrans(string.ascii_uppercase, string.ascii_lowercase)
_UPPER = str.maketrans(string.ascii_lowercase, string.ascii_uppercase)


def ascii_lower(text: str) -> str:
    """``text`` with the ASCII letters A-Z lower-cased and every other character unchanged."""
    return text.translate(_LOWER)


def ascii_upper(text: str) -> str:
    """``text`` with the ASCII letters a-z upper-cased and every other character unchanged."""
    return text.translate(_UPPER)


def _folds_onto_ascii(c: str) -> bool:
    return not c.isascii() and any(ch.isascii() for ch in c.lower())


def command_lower(text: str) -> str:
    """``text.lower()``, except that a non-ASCII character whose lower case holds an ASCII
    letter (the Kelvin sign, ``"İ"``) is kept as it is, so it matches no ASCII command. Other
    letters fold as usual (``"CAFÉ"`` -> ``"café"``), so non-ASCII names still match."""
    if text.isascii():
        return text.lower()
    return "".join(c if _folds_onto_ascii(c) else c.lower() for c in text)
