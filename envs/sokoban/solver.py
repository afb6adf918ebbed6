"""Optimal Sokoban solver: A* over box pushes, with costs counted in player moves.

Each search node is the state right after a push (player on the box's old cell). Its successors
are the pushes the player can reach; an edge costs the walk to the push cell plus one. The
heuristic, the sum over boxes of the push distance to the nearest target ignoring other boxes,
never overestimates and changes by at most one per push, so the first goal popped is optimal.
Cells from which a box can never reach any target (simple dead squares) are pruned.
"""

from __future__ import annotations

import heapq
from collections import deque
from dataclasses import dataclass

from .room import Layout, State, walk

_OPPOSITE = (1, 0, 3, 2)


@dataclass(frozen=True)
class Solution:
    """An optimal plan as action indices (0 up, 1 down, 2 left, 3 right)."""

    actions: tuple[int, ...]

    def __len__(self) -> int:
        return len(self.actions)


class Solver:
    """Solves states of one layout; precomputes what depends on the layout only."""

    def __init__(self, layout: Layout):
        self.layout = layout
        self.offsets = layout.offsets()
        self.nbrs = layout.neighbours()
        self.push_dist = self._push_distances()

    def _push_distances(self) -> dict[int, int]:
        """For every cell, the fewest pushes that bring a lone box from it to some target.

        Found by pulling boxes backwards from the targets: a box at ``c`` can be pulled to
        ``c - o`` when the player can stand at ``c - o`` and then at ``c - 2o``.
        """
        floor, dist = self.layout.floor, {t: 0 for t in self.layout.targets}
        queue = deque(self.layout.targets)
        while queue:
            c = queue.popleft()
            for o in self.offsets:
                prev, stand = c - o, c - 2 * o
                if prev in floor and stand in floor and prev not in dist:
                    dist[prev] = dist[c] + 1
                    queue.append(prev)
        return dist

    def heuristic(self, boxes: frozenset[int]) -> int:
        pd = self.push_dist
        return sum(pd[b] for b in boxes)

    def solve(
        self, state: State, max_cost: int | None = None, max_nodes: int = 200_000
    ) -> Solution | None:
        """An optimal plan from ``state``, or ``None`` if none exists within ``max_cost`` moves.

        ``max_nodes`` bounds the search effort; when it is exhausted ``None`` is returned.
        """
        targets = self.layout.targets
        pd = self.push_dist
        if any(b not in pd for b in state.boxes):
            return None
        if state.boxes <= targets:
            return Solution(())
        bound = float("inf") if max_cost is None else max_cost
        start = (state.player, state.boxes)
        g_best = {start: 0}
        # parent: node -> (previous node, walk path actions + push action)
        parents: dict[
            tuple[int, frozenset[int]], tuple[tuple[int, frozenset[int]], tuple[int, ...]]
        ] = {}
        counter = 0
        heap = [(self.heuristic(state.boxes), counter, 0, start)]
        expanded = 0
        offsets, floor = self.offsets, self.layout.floor
        while heap:
            f, _, g, node = heapq.heappop(heap)
            if g > g_best.get(node, bound + 1):
                continue
            player, boxes = node
            if boxes <= targets:
                return Solution(self._plan(parents, node))
            expanded += 1
            if expanded > max_nodes:
                return None
            dist, parent = walk(self.nbrs, player, boxes)
            for b in boxes:
                for a, o in enumerate(offsets):
                    stand, dest = b - o, b + o
                    if stand not in dist or dest not in floor or dest in boxes or dest not in pd:
                        continue
                    ng = g + dist[stand] + 1
                    new_boxes = (boxes - {b}) | {dest}
                    h = self.heuristic(new_boxes)
                    if ng + h > bound:
                        continue
                    child = (b, frozenset(new_boxes))
                    if ng < g_best.get(child, bound + 1):
                        g_best[child] = ng
                        parents[child] = (node, (*_path(parent, player, stand), a))
                        counter += 1
                        heapq.heappush(heap, (ng + h, counter, ng, child))
        return None

    @staticmethod
    def _plan(parents, node) -> tuple[int, ...]:
        chunks = []
        while node in parents:
            node, chunk = parents[node]
            chunks.append(chunk)
        return tuple(a for chunk in reversed(chunks) for a in chunk)


def _path(parent: dict[int, tuple[int, int]], start: int, goal: int) -> tuple[int, ...]:
    """Walk actions from ``start`` to ``goal`` following BFS parents."""
    actions = []
    c = goal
    while c != start:
        c, a = parent[c]
        actions.append(a)
    return tuple(reversed(actions))
