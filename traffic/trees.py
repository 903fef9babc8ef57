"""Tree-shaped AllReduce pieces: a transfer builder, the pipelined reduce-then-broadcast of one
segment over one overlay tree, and a packing of several such trees.

Dependency rules every emitter here keeps (see docs/design.md): a transfer depends only on
transfers its src received or sent; a server forwards a segment only after every write into
it has arrived; and the copies that finally overwrite a segment are ordered after the sends
that read it, through the chain reduce -> root -> broadcast.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable, Iterable, Sequence

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


def reduce_broadcast(order: Sequence[Hashable], children: dict, root: Hashable,
                     add: Callable[[Hashable, Hashable, str, list[int]], int],
                     down: tuple[Sequence[Hashable], dict] | None = None) -> None:
    """The one rule that turns a tree into dependent transfers (baselines and the learned
    scheduler both call it). ``order`` lists the tree's servers parents before children,
    ``children[v]`` the children of v. Calls ``add(src, dst, op, deps)`` (returning the new
    transfer's id) for every server's reduce to its parent, leaves first, depending on its
    children's reduces; then for every copy down, the root first, the root's copies
    depending on every reduce into it and any other server's on the copy it received.
    ``down``: (order, children) of another tree over the same servers to broadcast down
    (the reduce tree's own by default).

    >>> calls = []
    >>> def add(src, dst, op, deps):
    ...     calls.append((src, dst, op, deps))
    ...     return len(calls) - 1
    >>> reduce_broadcast(["r", "a", "b"], {"r": ["a"], "a": ["b"], "b": []}, "r", add)
    >>> for call in calls:
    ...     print(call)
    ('b', 'a', 'reduce', [])
    ('a', 'r', 'reduce', [0])
    ('r', 'a', 'copy', [1])
    ('a', 'b', 'copy', [2])
    """
    parent = {c: v for v in order for c in children[v]}
    up: dict = {}
    for v in reversed(order):
        if v != root:
            up[v] = add(v, parent[v], "reduce", [up[c] for c in children[v]])
    down_order, down_children = down if down is not None else (order, children)
    got: dict = {}
    for v in down_order:
        have = [up[c] for c in children[v]] if v == root else [got[v]]
        for c in down_children[v]:
            got[c] = add(v, c, "copy", have)


def emit_tree(builder: Builder, tree: Tree, root: str, offset: int, count: int,
              chunks: int = 1, down_tree: Tree | None = None) -> None:
    """Reduce elements [offset, offset + count) up ``tree`` to ``root`` and broadcast them
    back down (down ``down_tree`` when given: another tree over the same servers), pipelined
    in ``chunks`` pieces.

    A server sends chunk c to its parent once chunk c of every child has arrived and its own
    chunk c - 1 has (one message in flight per link, so chunks follow each other instead of
    sharing the link); the root and every server that received chunk c forward it to each
    child, again one chunk in flight per child.
    """
    order, children = children_of(tree, root)
    down = tree if down_tree is None else down_tree
    down_links = None if down_tree is None else children_of(down_tree, root)
    last_up: dict[str, int] = {}
    last_down: dict[str, int] = {}
    for off, cnt in segments(count, max(1, min(chunks, count))):
        off += offset

        def add(src: str, dst: str, op: str, deps: list[int], off: int = off,
                cnt: int = cnt) -> int:
            # One message in flight per link: also wait for the previous piece on it.
            if op == "reduce":
                tid = builder.add(src, dst, off, cnt, op, tree[src][1], deps + [last_up.get(src)])
                last_up[src] = tid
            else:
                tid = builder.add(src, dst, off, cnt, op, down[dst][1][::-1],
                                  deps + [last_down.get(dst)])
                last_down[dst] = tid
            return tid

        reduce_broadcast(order, children, root, add, down_links)


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
