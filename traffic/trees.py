"""Tree-shaped AllReduce pieces: a transfer builder, the pipelined reduce-then-broadcast of one
segment over one overlay tree, and a packing of several such trees.

Dependency rules every emitter here keeps (see docs/design.md): a transfer depends only on
transfers its src received or sent; a server forwards a segment only after every write into
it has arrived; and the copies that finally overwrite a segment are ordered after the sends
that read it, through the chain reduce -> root -> broadcast.
"""

from __future__ import annotations

from collections.abc import Iterable

from traffic.overlay import Router, Tree, children_of, spt_tree
from traffic.schedule import Transfer, segments


class Builder:
    """Collects transfers with consecutive ids."""

    def __init__(self) -> None:
        self.transfers: list[Transfer] = []

    def add(self, src: str, dst: str, offset: int, count: int, op: str,
            path: Iterable[str], deps: Iterable[int | None] = ()) -> int:
        """Append a transfer and return its id; ``None`` entries in deps are dropped."""
        tid = len(self.transfers)
        wanted = sorted({d for d in deps if d is not None})
        self.transfers.append(Transfer(tid, src, dst, offset, count, op, tuple(path),
                                       tuple(wanted)))
        return tid


def emit_tree(builder: Builder, tree: Tree, root: str, offset: int, count: int,
              chunks: int = 1) -> None:
    """Reduce elements [offset, offset + count) up ``tree`` to ``root`` and broadcast them
    back down, pipelined in ``chunks`` pieces.

    A server sends chunk c to its parent once chunk c of every child has arrived and its own
    chunk c - 1 has (one message in flight per link, so chunks follow each other instead of
    sharing the link); the root and every server that received chunk c forward it to each
    child, again one chunk in flight per child.
    """
    order, children = children_of(tree, root)
    last_up: dict[str, int] = {}
    last_down: dict[str, int] = {}
    for off, cnt in segments(count, max(1, min(chunks, count))):
        off += offset
        up: dict[str, int] = {}
        for v in reversed(order):
            if v == root:
                continue
            parent, path = tree[v]
            deps = [up[c] for c in children[v]] + [last_up.get(v)]
            up[v] = last_up[v] = builder.add(v, parent, off, cnt, "reduce", path, deps)
        down: dict[str, int] = {}
        for v in order:
            have = [up[c] for c in children[v]] if v == root else [down[v]]
            for c in children[v]:
                path = tree[c][1][::-1]
                down[c] = last_down[c] = builder.add(v, c, off, cnt, "copy", path,
                                                     have + [last_down.get(c)])


def tree_packing(router: Router, count: int) -> list[tuple[str, Tree]]:
    """``count`` shortest-path spanning trees with spread-out roots (the centre, then each
    time the server farthest from the roots so far), each steered off the links the earlier
    ones use; ``router.load`` ends holding one unit per tree on every link each tree crosses
    (both directions: reduce up, broadcast down)."""
    roots = [router.center()]
    while len(roots) < min(count, len(router.servers)):
        roots.append(max((v for v in router.servers if v not in roots),
                         key=lambda v: (min(router.hops(v, r) for r in roots),
                                        -router.rank[v])))
    trees = []
    for root in roots:
        spanning = spt_tree(router, root, penalty=2.0)
        for _, path in spanning.values():
            router.add(path, 1.0)
            router.add(path[::-1], 1.0)
        trees.append((root, spanning))
    return trees
