"""From chosen trees to transfers, and from a send order to a valid Schedule.

The buffer is cut into ``chunks`` segments; chunk c is owned by server ``c % N`` and carried
by one tree rooted there. ``Plan`` lists every transfer the trees need (a *task*: reduce up
each hop, then copy down it) with its data dependencies, which alone already make a correct
AllReduce:

- a server sends its reduce of a chunk to its parent once the reduces of all its children
  for that chunk have arrived (deps received by the src);
- the root sends the final value down once every reduce into it has arrived, any other
  server once the copy from its parent has arrived (deps received by the src);
- every write into a server's chunk (children's reduces, the parent's copy) is ordered with
  its sends of that chunk through this chain, so no race is possible.

``Plan.schedule(rounds)`` adds the workload scheduler's decision: tasks placed in rounds (no
two tasks of one round share a directed link) become, per sending link, a chain: a task
also waits for the previous task its src sent on the same first link. That dependency is on
a transfer sent by the src itself, so the locality rule holds.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from agent.trees import Overlay, Tree
from traffic.schedule import DTYPES, Schedule, Transfer, segments
from traffic.trees import reduce_broadcast


@dataclass(frozen=True)
class Task:
    """One transfer of a plan, before the scheduler orders it."""

    src: int
    dst: int
    chunk: int
    op: str
    hop: int
    deps: tuple[int, ...]
    #: Longest chain of tasks (this one included) that must follow each other from here to
    #: the end of this chunk's broadcast.
    tail: int


class Plan:
    """The transfers of one tree per chunk over ``overlay``'s graph."""

    def __init__(self, overlay: Overlay, trees: list[Tree], size_bytes: int,
                 dtype: str = "float32", chunks: int | None = None) -> None:
        if dtype not in DTYPES:
            raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
        elements = size_bytes // DTYPES[dtype]
        chunks = chunks or len(trees)
        if elements < chunks or size_bytes % DTYPES[dtype]:
            raise ValueError(f"size_bytes {size_bytes} cannot be cut into {chunks} chunks "
                             f"of {dtype}")
        self.overlay = overlay
        self.trees = trees
        self.size_bytes = size_bytes
        self.dtype = dtype
        #: The buffer's chunks; with fewer trees than ``chunks`` the plan carries the first
        #: ones only (a partial plan, not an AllReduce).
        self.segments = segments(elements, chunks)
        self.tasks: list[Task] = []
        #: Simulated makespan with data dependencies only, once someone computed it.
        self.baseline_s: float | None = None
        for c, tree in enumerate(trees):
            self._emit(c, tree)
        ov = overlay
        rows = []
        for t in self.tasks:
            path = ov.path(t.hop)
            rows.append([ov.link_id[(a, b)] for a, b in zip(path, path[1:], strict=False)])
        width = max(len(r) for r in rows)
        #: Directed-link ids of every task's path, padded with the overlay's dummy link.
        self.links = np.full((len(rows), width), ov.dummy)
        for i, r in enumerate(rows):
            self.links[i, : len(r)] = r
        self.first_link = self.links[:, 0].copy()
        self.bytes = np.array([self.segments[t.chunk][1] * DTYPES[dtype] for t in self.tasks],
                              dtype=float)

    def _emit(self, chunk: int, tree: Tree) -> None:
        ov, kids = self.overlay, tree.children()
        order, stack = [], [tree.root]
        while stack:
            v = stack.pop()
            order.append(v)
            stack.extend(kids[v])
        height = {}
        for v in reversed(order):
            height[v] = 1 + max((height[c] for c in kids[v]), default=0)
        depth = {tree.root: 0}
        for v in order:
            for c in kids[v]:
                depth[c] = depth[v] + 1
        bcast_len = max(height.values()) - 1

        def add(src: int, dst: int, op: str, deps: list[int]) -> int:
            if op == "reduce":
                # Reduce of src, the rest of the reduce to the root, the full broadcast.
                return self._add(src, dst, chunk, op, tree.hop[src], tuple(deps),
                                 depth[src] + bcast_len)
            return self._add(src, dst, chunk, op, int(ov.reverse[tree.hop[dst]]), tuple(deps),
                             height[dst])

        reduce_broadcast(order, dict(enumerate(kids)), tree.root, add)

    def _add(self, src: int, dst: int, chunk: int, op: str, hop: int, deps: tuple[int, ...],
             tail: int) -> int:
        self.tasks.append(Task(src, dst, chunk, op, hop, deps, tail))
        return len(self.tasks) - 1

    def schedule(self, rounds: list[list[int]] | None = None, algo: str = "drl",
                 meta: dict | None = None) -> Schedule:
        """The Schedule of this plan; ``rounds`` (task indices per round, each task once)
        chains the sends of every link in round order, None keeps data deps only."""
        extra: dict[int, int] = {}
        if rounds is not None:
            placed = sorted(i for r in rounds for i in r)
            if placed != list(range(len(self.tasks))):
                raise ValueError("rounds must place every task exactly once")
            last: dict[tuple[int, int], int] = {}
            for r in rounds:
                for i in r:
                    key = (self.tasks[i].src, int(self.first_link[i]))
                    if key in last:
                        extra[i] = last[key]
                for i in r:
                    last[(self.tasks[i].src, int(self.first_link[i]))] = i
        ov = self.overlay
        transfers = []
        for i, t in enumerate(self.tasks):
            off, cnt = self.segments[t.chunk]
            deps = set(t.deps)
            if i in extra:
                deps.add(extra[i])
            path = ov.path(t.hop)
            transfers.append(Transfer(i, path[0], path[-1], off, cnt, t.op, path,
                                      tuple(sorted(deps))))
        return Schedule(topology=dict(ov.graph.graph["spec"]), size_bytes=self.size_bytes,
                        dtype=self.dtype, transfers=tuple(transfers), algo=algo,
                        meta=dict(meta or {}))
