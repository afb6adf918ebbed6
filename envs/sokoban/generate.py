"""Seeded Sokoban room generation by reverse play.

The algorithm follows gym-sokoban's idea (carve a room by a random walk, put the boxes on their
targets, then pull boxes away from the solved state and keep the most scrambled state), written
anew for speed and reproducibility:

- all randomness comes from the caller's ``numpy.random.Generator`` (no global state), so the
  same seed always gives the same room;
- the reverse search works at the level of pulls (the player walks anywhere it can reach between
  pulls) with an explored set and an effort budget, instead of a depth-first search over single
  moves;
- each kept state carries an upper bound on its forward solution length (the reverse path played
  forwards), so only states solvable within the step cap are candidates; the optimal solver then
  confirms the plan length, and a room whose optimal plan exceeds ``max_steps`` is re-drawn.

Score of a candidate (as gym-sokoban): the number of times the pulled box changed, times the sum of
the boxes' Manhattan distances from their own targets.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from .room import Layout, State, walk
from .solver import Solution, Solver

# Carving patterns (row, col offsets) stamped along the random walk.
_PATTERNS: tuple[tuple[tuple[int, int], ...], ...] = (
    ((0, -1), (0, 0), (0, 1)),  # horizontal bar
    ((-1, 0), (0, 0), (1, 0)),  # vertical bar
    ((0, -1), (0, 0), (1, 0)),  # corner
    ((0, -1), (0, 0), (1, -1), (1, 0)),  # 2x2 block
    ((0, 0), (0, 1), (1, 0)),  # corner, mirrored
)
_DIRECTIONS = ((-1, 0), (1, 0), (0, -1), (0, 1))


@dataclass(frozen=True)
class GeneratedRoom:
    layout: Layout
    state: State
    solution: Solution  # an optimal plan from ``state``

    @property
    def optimal_steps(self) -> int:
        return len(self.solution)


class GenerationError(RuntimeError):
    """No room satisfying the constraints was found within the allowed attempts."""


def carve_topology(
    rng: np.random.Generator, height: int, width: int, open_room: bool
) -> frozenset[int]:
    """Floor cells of a room: the full interior, or a random-walk carving (gym-sokoban style)."""
    if open_room:
        return frozenset(r * width + c for r in range(1, height - 1) for c in range(1, width - 1))
    grid = np.zeros((height, width), dtype=bool)
    r, c = int(rng.integers(1, height - 1)), int(rng.integers(1, width - 1))
    direction = _DIRECTIONS[int(rng.integers(4))]
    for _ in range(int(1.7 * (height + width))):
        if rng.random() < 0.35:
            direction = _DIRECTIONS[int(rng.integers(4))]
        r = min(max(r + direction[0], 1), height - 2)
        c = min(max(c + direction[1], 1), width - 2)
        for dr, dc in _PATTERNS[int(rng.integers(len(_PATTERNS)))]:
            rr, cc = r + dr, c + dc
            if 1 <= rr < height - 1 and 1 <= cc < width - 1:
                grid[rr, cc] = True
    return frozenset(int(i) for i in np.flatnonzero(grid))


def reverse_play(
    rng: np.random.Generator,
    layout: Layout,
    player: int,
    search_depth: int,
    max_steps: int,
    max_expansions: int,
) -> State | None:
    """Pull boxes away from the solved state; return the best-scoring reachable state.

    Depth-first over pulls in random order, at most ``search_depth`` pulls deep and
    ``max_expansions`` states expanded. Only states whose forward solution is known to fit in
    ``max_steps`` moves (including the walk from the final player cell) are candidates.
    """
    width = layout.width
    targets = sorted(layout.targets)
    nbrs = layout.neighbours()
    offsets = layout.offsets()
    floor = layout.floor

    def displacement(pos: tuple[int, ...]) -> int:
        return sum(
            abs(p // width - t // width) + abs(p % width - t % width) for p, t in zip(pos, targets)
        )

    # node: (player, box positions by box id, last pulled id, swaps, moves so far, depth)
    stack = [(player, tuple(targets), -1, 0, 0, 0)]
    seen = {(player, frozenset(targets))}
    best: tuple[int, int, int, frozenset[int]] | None = None  # (score, -cost, player, boxes)
    expansions = 0
    while stack and expansions < max_expansions:
        p, pos, last, swaps, cost, depth = stack.pop()
        boxes = frozenset(pos)
        reach = walk(nbrs, p, boxes)[0]
        expansions += 1
        if depth > 0:
            score = swaps * displacement(pos)
            # The player will be placed on a random cell it can reach; bound that walk by the
            # farthest reachable cell so the forward plan still fits.
            bound = cost + max(reach.values())
            if score > 0 and bound <= max_steps and (best is None or (score, -cost) > best[:2]):
                best = (score, -cost, p, boxes)
        if depth >= search_depth:
            continue
        children = []
        for i, b in enumerate(pos):
            for o in offsets:
                stand, back = b + o, b + 2 * o
                if stand not in reach or back not in floor or back in boxes:
                    continue
                new_pos = pos[:i] + (stand,) + pos[i + 1 :]
                key = (back, frozenset(new_pos))
                if key in seen:
                    continue
                seen.add(key)
                children.append(
                    (back, new_pos, i, swaps + (i != last), cost + reach[stand] + 1, depth + 1)
                )
        for j in rng.permutation(len(children)):
            stack.append(children[j])
    if best is None:
        return None
    return State(best[2], best[3])


def generate_room(
    rng: np.random.Generator,
    dim_room: tuple[int, int] = (6, 6),
    num_boxes: int = 1,
    max_steps: int = 15,
    search_depth: int = 30,
    open_room: bool = False,
    max_expansions: int = 2000,
    max_tries: int = 200,
) -> GeneratedRoom:
    """Draw one room from ``rng``; its optimal plan is at most ``max_steps`` moves long.

    Raises :class:`GenerationError` (naming the settings) when ``max_tries`` draws all fail,
    which happens only for impossible settings (e.g. too many boxes for the room).
    """
    height, width = dim_room
    if height < 3 or width < 3:
        raise ValueError(f"dim_room must be at least (3, 3), got {dim_room}")
    if num_boxes < 1:
        raise ValueError(f"num_boxes must be >= 1, got {num_boxes}")
    if max_steps < 1 or search_depth < 1:
        raise ValueError("max_steps and search_depth must be >= 1")
    for _ in range(max_tries):
        floor = carve_topology(rng, height, width, open_room)
        if len(floor) < num_boxes + 2:
            continue
        cells = np.array(sorted(floor))
        chosen = rng.choice(len(cells), size=num_boxes + 1, replace=False)
        targets = frozenset(int(cells[i]) for i in chosen[:num_boxes])
        start_player = int(cells[chosen[num_boxes]])
        layout = Layout(height, width, floor, targets)
        state = reverse_play(rng, layout, start_player, search_depth, max_steps, max_expansions)
        if state is None:
            continue
        reach = sorted(walk(layout.neighbours(), state.player, state.boxes)[0])
        state = State(int(reach[int(rng.integers(len(reach)))]), state.boxes)
        solution = Solver(layout).solve(state, max_cost=max_steps)
        if solution is None or len(solution) == 0:
            continue
        return GeneratedRoom(layout, state, solution)
    raise GenerationError(
        f"no Sokoban room found in {max_tries} tries for dim_room={dim_room}, "
        f"num_boxes={num_boxes}, max_steps={max_steps}, search_depth={search_depth}"
    )
