"""The baseline AllReduce collectives: ring, parameter server (plain and sharded), pipelined
tree, double tree, the topology-aware multitree and the optimal tree packing, each a function
``(graph, size_bytes, dtype='float32') -> Schedule``.

Every schedule passes ``traffic.schedule.validate`` on BCube, DCell, Jellyfish and any
connected graph whose servers carry ``role`` and ``rank``. Pure: standard library, networkx
and numpy only.
"""

from __future__ import annotations

import math
from collections.abc import Callable

import networkx as nx
import numpy as np

from traffic.cuts import tree_allreduce_rate
from traffic.hierarchical import bcube_multitree
from traffic.overlay import Router, depth, spt_tree, topology_of
from traffic.rings import emit_ring, ring_packing, tour
from traffic.schedule import DTYPES, Schedule, segments
from traffic.trees import Builder, emit_tree, tree_packing


def _elements(size_bytes: int, dtype: str) -> int:
    if dtype not in DTYPES:
        raise ValueError(f"dtype {dtype!r} is not one of {', '.join(DTYPES)}")
    item = DTYPES[dtype]
    if isinstance(size_bytes, bool) or not isinstance(size_bytes, int | np.integer):
        raise ValueError(f"size_bytes must be an integer, got {size_bytes!r}")
    if size_bytes < item or size_bytes % item:
        raise ValueError(f"size_bytes {size_bytes} is not a positive multiple of {item} "
                         f"({dtype})")
    return int(size_bytes) // item


def from_builder(graph: nx.Graph, size_bytes: int, dtype: str, builder: Builder, algo: str,
                 **meta: object) -> Schedule:
    """The Schedule of ``builder``'s transfers on ``graph``, made by ``algo`` (``meta``: the
    Schedule's meta)."""
    return Schedule(topology=topology_of(graph), size_bytes=int(size_bytes), dtype=dtype,
                    transfers=tuple(builder.transfers), algo=algo, meta=dict(meta))


def _router(graph: nx.Graph) -> Router:
    router = Router(graph)
    if not router.servers:
        raise ValueError("the graph has no servers (nodes with role 'server')")
    return router


# -- ring ------------------------------------------------------------------------------------

def _gray_order(graph: nx.Graph) -> list[str]:
    """BCube servers in a cyclic n-ary Gray code: neighbours differ in one digit, so every
    ring hop crosses exactly one switch (wrap-around included)."""
    n, k = graph.graph["spec"]["params"]["n"], graph.graph["spec"]["params"]["k"]
    by_address = {tuple(a): v for v, a in graph.nodes(data="address") if a is not None}
    order = []
    for count in range(n ** (k + 1)):
        digits = [(count // n ** (k - i)) % n for i in range(k + 1)]
        gray = [digits[0]] + [(digits[i] - digits[i - 1]) % n for i in range(1, k + 1)]
        order.append(by_address[tuple(gray)])
    return order


def _tour(router: Router) -> list[str]:
    """A short cyclic order of the servers by hop distance."""
    names = router.servers
    dist = np.array([[router.hops(u, v) for v in names] for u in names], dtype=float)
    return [names[i] for i in tour(dist)]


def ring_order(graph: nx.Graph) -> list[str]:
    """The ring order the ``ring`` collective uses: a Gray code on BCube, a short tour by
    hop distance elsewhere."""
    router = _router(graph)
    spec = graph.graph.get("spec")
    if spec is not None and spec["family"] == "bcube":
        return _gray_order(graph)
    return _tour(router)


def ring(graph: nx.Graph, size_bytes: int, dtype: str = "float32", *,
         order: list[str] | None = None) -> Schedule:
    """Ring AllReduce: N-1 reduce-scatter steps then N-1 all-gather steps of one chunk
    (1/N of the buffer) per server, each hop on a shortest path.

    The order keeps ring neighbours close (``ring_order``, or ``order``); hop paths are
    chosen to spread load. Each send waits only for the chunk it forwards to have arrived.
    """
    elements = _elements(size_bytes, dtype)
    router = _router(graph)
    order = list(order) if order is not None else ring_order(graph)
    if sorted(order) != sorted(router.servers):
        raise ValueError("order must list every server exactly once")
    n = len(order)
    paths = [router.path(order[i], order[(i + 1) % n], 1.0) for i in range(n)]
    builder = Builder()
    emit_ring(builder, order, paths, 0, elements)
    return from_builder(graph, size_bytes, dtype, builder, "ring", order=order)


# -- parameter servers -----------------------------------------------------------------------

def ps(graph: nx.Graph, size_bytes: int, dtype: str = "float32", *, root: str | None = None,
       chunks: int = 1) -> Schedule:
    """Parameter server: every server pushes its buffer to one server (reduce), which sends
    the sum back to all (copy). The root defaults to the server with the most link capacity
    and the smallest eccentricity; ``chunks > 1`` pipelines push and pull."""
    elements = _elements(size_bytes, dtype)
    router = _router(graph)
    root = root or router.center()
    if root not in router.rank:
        raise ValueError(f"root {root!r} is not a server")
    others = [v for v in router.servers if v != root]
    pieces = segments(elements, max(1, min(chunks, elements)))
    up = {v: router.path(v, root, size_bytes) for v in others}
    down = {v: router.path(root, v, size_bytes) for v in others}
    builder = Builder()
    last_push: dict[str, int] = {}
    last_pull: dict[str, int] = {}
    for off, cnt in pieces:
        pushed = []
        for v in others:
            last_push[v] = builder.add(v, root, off, cnt, "reduce", up[v], [last_push.get(v)])
            pushed.append(last_push[v])
        for v in others:
            last_pull[v] = builder.add(root, v, off, cnt, "copy", down[v],
                                       pushed + [last_pull.get(v)])
    return from_builder(graph, size_bytes, dtype, builder, "ps", root=root)


def ps_sharded(graph: nx.Graph, size_bytes: int, dtype: str = "float32") -> Schedule:
    """Sharded parameter server: server j owns the j-th 1/N of the buffer; every server
    pushes each shard to its owner (reduce), and owners send the sums back (copy)."""
    elements = _elements(size_bytes, dtype)
    router = _router(graph)
    names = router.servers
    n = len(names)
    shards = segments(elements, n)
    builder = Builder()
    into: dict[int, list[int]] = {j: [] for j in range(len(shards))}
    for shift in range(1, n):
        for i, src in enumerate(names):
            j = (i + shift) % n
            if j < len(shards):
                off, cnt = shards[j]
                path = router.path(src, names[j], cnt)
                into[j].append(builder.add(src, names[j], off, cnt, "reduce", path))
    for shift in range(1, n):
        for j in range(len(shards)):
            off, cnt = shards[j]
            dst = names[(j + shift) % n]
            path = router.path(names[j], dst, cnt)
            builder.add(names[j], dst, off, cnt, "copy", path, into[j])
    return from_builder(graph, size_bytes, dtype, builder, "ps-sharded")


# -- trees -----------------------------------------------------------------------------------

def _auto_chunks(height: int, elements: int) -> int:
    """Pipeline depth: enough chunks that filling and draining a tree of ``height`` hops
    costs about a tenth of the transfer, within [8, 64]."""
    return max(1, min(elements, max(8, min(64, 10 * height))))


def tree(graph: nx.Graph, size_bytes: int, dtype: str = "float32", *,
         root: str | None = None, chunks: int | None = None) -> Schedule:
    """Pipelined tree: reduce to a root along a shortest-path spanning tree, then broadcast
    back along it, the buffer cut into ``chunks`` pieces that follow each other."""
    elements = _elements(size_bytes, dtype)
    router = _router(graph)
    root = root or router.center()
    spanning = spt_tree(router, root)
    chunks = chunks or _auto_chunks(depth(spanning, root), elements)
    builder = Builder()
    emit_tree(builder, spanning, root, 0, elements, chunks)
    return from_builder(graph, size_bytes, dtype, builder, "tree", root=root, chunks=chunks)


def double_tree(graph: nx.Graph, size_bytes: int, dtype: str = "float32", *,
                chunks: int | None = None) -> Schedule:
    """Two pipelined trees, each reducing and broadcasting half the buffer: the second is
    rooted at the server farthest from the first root and steered off the first tree's
    links, so the halves mostly use different links and different NICs."""
    elements = _elements(size_bytes, dtype)
    router = _router(graph)
    first = router.center()
    tree_a = spt_tree(router, first)
    for _, path in tree_a.values():
        router.add(path, 1.0)
        router.add(path[::-1], 1.0)
    second = router.farthest(first)
    tree_b = spt_tree(router, second, penalty=2.0)
    halves = segments(elements, 2)
    builder = Builder()
    used = []
    for (off, cnt), spanning, root in zip(halves, (tree_a, tree_b), (first, second),
                                          strict=False):
        c = chunks or _auto_chunks(depth(spanning, root), cnt)
        emit_tree(builder, spanning, root, off, cnt, c)
        used.append(root)
    return from_builder(graph, size_bytes, dtype, builder, "double-tree", roots=used)


def multitree(graph: nx.Graph, size_bytes: int, dtype: str = "float32") -> Schedule:
    """Topology-aware multitree: many spanning trees that together load every NIC evenly,
    the buffer split across them, each reduced to its root and broadcast back.

    Intact BCube: the k+1-level reduce-scatter / all-gather of ``traffic.hierarchical`` (one
    digit-correction tree per part and owner, every level busy at once), which meets the
    bandwidth lower bound. Elsewhere: a greedy packing of directed rings
    (``traffic.rings.ring_packing``), each on its share of the buffer: a ring is N
    path-shaped spanning trees (one per chunk) perfectly staggered, so the packing's worst
    directed-link load sets the time, and the packing minimises it.
    """
    elements = _elements(size_bytes, dtype)
    router = _router(graph)
    names = router.servers
    n = len(names)
    spec = graph.graph.get("spec")
    builder = Builder()
    # The digit-correction trees need every BCube link (a copy may have lost one).
    intact = spec is not None and graph.number_of_edges() == n * (spec["params"].get("k", 0) + 1)
    if intact and spec["family"] == "bcube" and elements >= n:
        parts = segments(elements, max(1, min(spec["params"]["k"] + 1, elements // n)))
        bcube_multitree(builder, graph, parts)
        return from_builder(graph, size_bytes, dtype, builder, "multitree", style="bcube-levels")
    if n < 2:
        return from_builder(graph, size_bytes, dtype, builder, "multitree")
    rings, ring_cost = ring_packing(router)
    packed, tree_cost = _best_tree_packing(graph, elements)
    if tree_cost < ring_cost * (1 - 1e-9):
        for (root, spanning, chunks), (off, cnt) in zip(packed, segments(elements, len(packed)),
                                                         strict=False):
            emit_tree(builder, spanning, root, off, cnt, chunks)
        return from_builder(graph, size_bytes, dtype, builder, "multitree", style="trees",
                            roots=[root for root, _, _ in packed])
    _emit_rings(builder, rings, elements)
    return from_builder(graph, size_bytes, dtype, builder, "multitree", style="rings",
                        rings=len(rings))


def _best_tree_packing(graph: nx.Graph, elements: int):
    """The packing of 1..2*(most NICs) pipelined trees (``tree_packing``) with the lowest
    predicted time: worst link load per capacity times the pipeline's fill-and-drain
    factor (chunks + 2 height) / chunks. Returns ([(root, tree, chunks)], that time)."""
    most = max(graph.degree(v) for v in Router(graph).servers)
    best, best_cost = [], math.inf
    for count in range(1, min(8, 2 * most) + 1):
        router = Router(graph)
        packed = tree_packing(router, count)
        if len(packed) < count:
            break
        worst = max(load / router.cap[link] for link, load in router.load.items()) / count
        height = max(depth(spanning, root) for root, spanning in packed)
        chunks = _auto_chunks(height, max(1, elements // count))
        cost = worst * (chunks + 2 * height) / chunks
        if cost < best_cost * (1 - 1e-9):
            best = [(root, spanning, chunks) for root, spanning in packed]
            best_cost = cost
    return best, best_cost


def packing(graph: nx.Graph, size_bytes: int, dtype: str = "float32") -> Schedule:
    """Optimal tree packing (``traffic.packing``, after ForestColl): every server's shard is
    reduced into it and broadcast back over trees whose rates come from a linear programme
    over the links' capacities, so it adapts to any graph and to unequal link rates.

    Where a packing of rings (``traffic.rings.ring_packing``; a ring is N path-shaped trees,
    one per server) already reaches the optimum, the rings are used: a ring AllReduce
    pipelines perfectly, trees only nearly (each tree copy is cut into ``CHUNKS_PER_HOP``
    chunks per server hop of its height, of at least MIN_CHUNK_BYTES). Where the packing
    optimum is above the message-count bound and running the ReduceScatter and the AllGather
    at once is faster (``traffic.cuts.tree_allreduce_rate``; a thin or slow link), every shard is
    reduced up one family of trees and broadcast down another, both from one LP.
    """
    from traffic.packing import MIN_CHUNK_BYTES, emit_packing  # scipy: on use

    elements = _elements(size_bytes, dtype)
    router = _router(graph)
    builder = Builder()
    if len(router.servers) < 2:
        return from_builder(graph, size_bytes, dtype, builder, "packing")
    rate = tree_allreduce_rate(graph)
    rings = optimal_rings(graph, size_bytes, dtype, rate, router=router)
    if rings is not None:
        return rings
    packed = packing_forest(graph, rate)
    emit_packing(builder, packed, elements, min_chunk=max(1, MIN_CHUNK_BYTES // DTYPES[dtype]))
    return from_builder(graph, size_bytes, dtype, builder, "packing", style="trees",
                        trees=sum(len(items) for family in packed.families()
                                  for items in family.values()),
                        rate_to_optimum=packed.rate / packed.optimum)


def optimal_rings(graph: nx.Graph, size_bytes: int, dtype: str = "float32",
                  rate: tuple[float, bool] | None = None, *,
                  router: Router | None = None) -> Schedule | None:
    """``packing``'s Schedule where a packing of rings (``traffic.rings.ring_packing``)
    reaches the tree-packing optimum, else None. ``rate``: ``tree_allreduce_rate``'s
    answer, ``router``: the graph's Router, when the caller has them. At least two
    servers."""
    x, overlapped = rate if rate is not None else tree_allreduce_rate(graph)
    if overlapped:
        return None
    router = router or _router(graph)
    rings, ring_cost = ring_packing(router)
    # ring_cost: buffer fraction per directed link over its capacity in Mbit/s; the rings
    # reach the optimum when that time equals (1/N) / x (x in bit/s per server).
    if ring_cost > 1e6 / (len(router.servers) * x) * (1 + RING_RTOL):
        return None
    builder = Builder()
    _emit_rings(builder, rings, _elements(size_bytes, dtype))
    return from_builder(graph, size_bytes, dtype, builder, "packing", style="rings",
                        rings=len(rings))


def packing_forest(graph: nx.Graph, rate: tuple[float, bool] | None = None):
    """The tree packing ``packing`` emits where rings do not reach the optimum: the
    ``traffic.packing.Packing`` of broadcast trees (the ReduceScatter then runs up the same
    trees) or, where ``traffic.cuts.tree_allreduce_rate`` says both directions must run at
    once, of broadcast and reduce trees from one LP. ``rate``: that function's answer when
    the caller has it. At least two servers."""
    from traffic.packing import pack_trees  # scipy: on use

    x, overlapped = rate if rate is not None else tree_allreduce_rate(graph)
    if overlapped:
        return pack_trees(graph, optimum=x, overlap=True)
    return pack_trees(graph, optimum=2 * x)


def _emit_rings(builder: Builder, rings: list, elements: int) -> None:
    """Ring AllReduces of the buffer's shares (``ring_packing``'s weights), one after another
    in the buffer."""
    counts = [int(weight * elements) for weight, _, _ in rings]
    counts[0] += elements - sum(counts)
    offset = 0
    for count, (_, order, hops) in zip(counts, rings, strict=True):
        if count:
            emit_ring(builder, order, hops, offset, count)
        offset += count


#: Rings replace the tree packing when their time is within this (relative) of the optimum.
RING_RTOL = 1e-9


ALGORITHMS: dict[str, Callable[..., Schedule]] = {
    "ring": ring,
    "ps": ps,
    "ps-sharded": ps_sharded,
    "tree": tree,
    "double-tree": double_tree,
    "multitree": multitree,
    "packing": packing,
}


#: The baselines a DRL schedule is compared with, in the order tables list them.
BASELINES = ("ring", "ps", "ps-sharded", "tree", "multitree", "packing")


def build(algo: str, graph: nx.Graph, size_bytes: int, dtype: str = "float32") -> Schedule:
    """The Schedule of collective ``algo`` (a key of ALGORITHMS) on ``graph``."""
    try:
        make = ALGORITHMS[algo]
    except KeyError:
        raise ValueError(f"unknown algo {algo!r}; choose one of {', '.join(ALGORITHMS)}") \
            from None
    return make(graph, size_bytes, dtype)
