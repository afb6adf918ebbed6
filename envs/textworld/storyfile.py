"""Validate a Z-machine story file (.z8 and kin) before Jericho sees it.

Jericho's C core (Frotz) ends the whole process on a story file it cannot read ("Fatal error:
Story file read error", exit code 1), and a corrupt body can make it segfault or loop forever.
This check reads the header the Z-machine Standard 1.1 (section 11) defines and rejects, with an
error naming the file: files shorter than the header, unknown versions, a declared length past
the end of the file (truncated), header addresses outside the declared length, and a checksum
that does not match the content (corrupt). Files made by Inform (TextWorld's compiler) always
carry the length and checksum, so a real game passes; a crafted file that passes can still be
caught by :mod:`agentrl.envs.textworld.probe`, which loads it in a child process.
"""

from __future__ import annotations

from pathlib import Path

__all__ = ["StoryFileError", "check_story_file"]

HEADER = 64
# Multiplier of the header's file-length word, by version (Standard 1.1, section 11.1.6).
_LENGTH_SCALE = {1: 2, 2: 2, 3: 2, 4: 4, 5: 4, 6: 8, 7: 8, 8: 8}
# Byte addresses in the header that must point inside the story (name, offset).
_ADDRESSES = (
    ("high memory base", 0x04),
    ("dictionary", 0x08),
    ("object table", 0x0A),
    ("global variables", 0x0C),
    ("static memory base", 0x0E),
    ("abbreviations table", 0x18),
)


class StoryFileError(ValueError):
    """A game file that is not a readable Z-machine story; the message names the file."""


def _word(data: bytes, offset: int) -> int:
    return int.from_bytes(data[offset : offset + 2], "big")


def check_story_file(path: str | Path) -> None:
    """Raise :class:`StoryFileError` naming ``path`` unless it is a well-formed Z-machine story."""
    path = Path(path)
    try:
        data = path.read_bytes()
    except OSError as exc:
        raise StoryFileError(f"{path}: cannot read the game file ({exc})") from exc
    if len(data) < HEADER:
        raise StoryFileError(
            f"{path}: not a Z-machine story file ({len(data)} bytes, shorter than its "
            f"{HEADER}-byte header)"
        )
    version = data[0]
    if version not in _LENGTH_SCALE:
        raise StoryFileError(
            f"{path}: not a Z-machine story file (header byte 0, the version, is {version}; "
            "expected 1-8)"
        )
    declared = _word(data, 0x1A) * _LENGTH_SCALE[version]
    if declared == 0 and version <= 3:
        declared = len(data)  # very early story files leave the length out (Standard 11.1.6)
    if declared < HEADER:
        raise StoryFileError(
            f"{path}: corrupt Z-machine header (declared story length {declared} bytes is "
            "shorter than the header)"
        )
    if declared > len(data):
        raise StoryFileError(
            f"{path}: truncated Z-machine story file (the header declares {declared} bytes; "
            f"the file has {len(data)})"
        )
    for name, offset in _ADDRESSES:
        addr = _word(data, offset)
        if (addr or name != "abbreviations table") and not HEADER <= addr < declared:
            raise StoryFileError(
                f"{path}: corrupt Z-machine header ({name} at byte {addr}, outside the story's "
                f"{HEADER}..{declared - 1})"
            )
    if _word(data, 0x0E) <= _word(data, 0x0C):
        raise StoryFileError(
            f"{path}: corrupt Z-machine header (the global variables, part of dynamic memory, "
            "do not lie below the static memory base)"
        )
    if version >= 3:  # the checksum exists from version 3 on
        stated = _word(data, 0x1C)
        actual = sum(data[HEADER:declared]) % 0x10000
        if stated != actual:
            raise StoryFileError(
                f"{path}: corrupt Z-machine story file (header checksum {stated}, content sums "
                f"to {actual})"
            )
