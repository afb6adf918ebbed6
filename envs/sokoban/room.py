"""Sokoban rooms: representation, text rendering and moves.

A room is a fixed layout (walls, floor, targets) plus a mutable state (player cell, box cells).
Cells are flat indices ``r * width + c``; the outer ring is always wall.
"""

from __future__ import annotations

from collections import deque
from dataclasses import dataclass

import numpy as np

ACTIONS: tuple[str, ...] = ("up", "down", "left", "right")

# Reference symbols (gym-sokoban / verl-agent text mode).
WALL, FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET = (
    "#",
    "_",
    "O",
    "X",
    "√",
    "P",
    "S",
)


@dataclass(frozen=True)
class Layout:
    """The static part of a room: its size, which cells are floor, which are targets."""

    height: int
    width: int
    floor: frozenset[int]  # every walkable cell, targets included
    targets: frozenset[int]

    def offsets(self) -> tuple[int, int, int, int]:
        """Flat-index step for up, down, left, right."""
        return (-self.width, self.width, -1, 1)

    def neighbours(self) -> dict[int, tuple[tuple[int, int], ...]]:
        """For each floor cell, the (action index, floor cell) pairs one move away."""
        offs = self.offsets()
        return {
            c: tuple((a, c + o) for a, o in enumerate(offs) if c + o in self.floor)
            for c in self.floor
        }


@dataclass(frozen=True)
class State:
    """The dynamic part: where the player and the boxes are."""

    player: int
    boxes: frozenset[int]

    def key(self) -> str:
        """Canonical identity of the true state: ``player|box,box,...`` with sorted boxes."""
        return f"{self.player}|{','.join(map(str, sorted(self.boxes)))}"


def render(layout: Layout, state: State) -> str:
    """Render the room as rows of reference symbols, one row per line."""
    rows = []
    for r in range(layout.height):
        row = []
        for c in range(layout.width):
            i = r * layout.width + c
            if i not in layout.floor:
                row.append(WALL)
            elif i == state.player:
                row.append(PLAYER_ON_TARGET if i in layout.targets else PLAYER)
            elif i in state.boxes:
                row.append(BOX_ON_TARGET if i in layout.targets else BOX)
            elif i in layout.targets:
                row.append(TARGET)
            else:
                row.append(FLOOR)
        rows.append("".join(row))
    return "\n".join(rows)


def parse(text: str) -> tuple[Layout, State]:
    """Inverse of :func:`render` (used by tests and for hand-written rooms)."""
    lines = text.strip("\n").split("\n")
    height, width = len(lines), max(len(line) for line in lines)
    floor, targets, boxes = set(), set(), set()
    player = -1
    for r, line in enumerate(lines):
        for c, ch in enumerate(line.ljust(width, WALL)):
            i = r * width + c
            if ch == WALL:
                continue
            if ch not in (FLOOR, TARGET, BOX, BOX_ON_TARGET, PLAYER, PLAYER_ON_TARGET):
                raise ValueError(f"unknown Sokoban symbol {ch!r} at row {r}, column {c}")
            floor.add(i)
            if ch in (TARGET, BOX_ON_TARGET, PLAYER_ON_TARGET):
                targets.add(i)
            if ch in (BOX, BOX_ON_TARGET):
                boxes.add(i)
            if ch in (PLAYER, PLAYER_ON_TARGET):
                if player >= 0:
                    raise ValueError("more than one player in the room")
                player = i
    if player < 0:
        raise ValueError("no player in the room")
    if len(boxes) != len(targets):
        raise ValueError(f"{len(boxes)} boxes but {len(targets)} targets")
    return Layout(height, width, frozenset(floor), frozenset(targets)), State(
        player, frozenset(boxes)
    )


def move(layout: Layout, state: State, action: int) -> tuple[State, int]:
    """Apply one move. Returns the new state and the change in boxes on target (-1, 0, +1).

    A move into a wall, or pushing a box into a wall or another box, leaves the state unchanged.
    """
    off = layout.offsets()[action]
    nxt = state.player + off
    if nxt not in layout.floor:
        return state, 0
    if nxt in state.boxes:
        beyond = nxt + off
        if beyond not in layout.floor or beyond in state.boxes:
            return state, 0
        boxes = (state.boxes - {nxt}) | {beyond}
        delta = int(beyond in layout.targets) - int(nxt in layout.targets)
        return State(nxt, frozenset(boxes)), delta
    return State(nxt, state.boxes), 0


def walk(
    nbrs: dict[int, tuple[tuple[int, int], ...]], start: int, boxes: frozenset[int]
) -> tuple[dict[int, int], dict[int, tuple[int, int]]]:
    """Where the player can walk from ``start`` without pushing: BFS distance per cell, and the
    parent (previous cell, action) of each cell reached. ``nbrs`` is ``Layout.neighbours()``."""
    dist = {start: 0}
    parent: dict[int, tuple[int, int]] = {}
    queue = deque([start])
    while queue:
        c = queue.popleft()
        d = dist[c] + 1
        for a, n in nbrs[c]:
            if n not in dist and n not in boxes:
                dist[n] = d
                parent[n] = (c, a)
                queue.append(n)
    return dist, parent


def to_array(layout: Layout, state: State) -> np.ndarray:
    """The room as an int8 grid: 0 wall, 1 floor, 2 target, 3 box on target, 4 box, 5 player."""
    grid = np.zeros((layout.height, layout.width), dtype=np.int8)
    for i in layout.floor:
        grid.flat[i] = 2 if i in layout.targets else 1
    for b in state.boxes:
        grid.flat[b] = 3 if b in layout.targets else 4
    grid.flat[state.player] = 5
    return grid
