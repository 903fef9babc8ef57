"""The optimal AllGather rate of a graph, from its cuts: the number that tree packings reach.

Pure: standard library, networkx, numpy and ``traffic.maxflow`` (numba); ``overlap_rate``
also HiGHS for its LP (``traffic.lp``). ``traffic.packing`` builds the trees that reach it;
``simulator.bounds.packing_bound`` turns ``tree_allreduce_rate`` into seconds.
"""

from __future__ import annotations

import math

import networkx as nx

from topology.links import link_rate_mbps
from topology.routing import servers as servers_by_rank


def link_capacities(graph: nx.Graph, goodput: float) -> dict[tuple[str, str], float]:
    """Bit/s of every directed link: ``topology.link_rate_mbps`` times ``goodput``."""
    caps = {}
    for a, b in graph.edges():
        caps[(a, b)] = caps[(b, a)] = link_rate_mbps(graph, a, b) * 1e6 * goodput
    return caps


def message_seconds_per_bit(graph: nx.Graph, *, goodput: float = 1.0) -> float:
    """Seconds per bit of buffer below which no AllReduce can finish on ``graph``: the
    message-count bound max(2 (N-1) / sum_v C(v), max_v 1 / C(v)), C(v) the bit/s of server
    v's links (``simulator.bounds.lower_bound`` proves it and scales it by the buffer)."""
    names = servers_by_rank(graph)
    if len(names) < 2:
        return 0.0
    caps = link_capacities(graph, goodput)
    capacity = {}
    for v in names:
        capacity[v] = sum(caps[(v, w)] for w in graph[v])
        if capacity[v] <= 0:
            raise ValueError(f"server {v} has no link capacity")
    every = 2 * (len(names) - 1) / sum(capacity.values())
    return max(every, max(1.0 / c for c in capacity.values()))


def packing_rate(graph: nx.Graph, *, goodput: float = 1.0) -> tuple[float, frozenset[str]]:
    """The optimal AllGather rate per server on ``graph`` (bit/s) and the cut that sets it.

    x* = min over node sets S holding some but not all servers of B+(S) / |S ∩ servers|,
    B+(S) the capacity leaving S: every shard that starts in S must leave it once, and by
    Edmonds' branching theorem (with switches split off, see ``traffic.packing``) a packing
    of broadcast trees reaches it. Found by a Dinkelbach iteration on max-flow
    (``traffic.maxflow``, in integer units: ``PACKING_UNITS``, ``PACKING_RTOL``): with a
    source feeding every server at rate x, x is feasible iff every server t receives x * N;
    a cut that falls short names a tighter S, and x becomes its exact ratio. Returns
    (x*, S); S holds the servers on the slow side (for a uniform network, every server but
    one).

    Servers that do not relay in the network (Jellyfish) still receive and re-send whole
    messages, as every ring does, so the relay rule changes paths, not this rate.
    """
    import numpy as np  # numpy: on use

    names = servers_by_rank(graph)
    if len(names) < 2:
        raise ValueError("the packing rate needs at least two servers")
    caps = link_capacities(graph, goodput)
    inflow = {t: sum(caps[(u, t)] for u in graph[t]) for t in names}
    # The tightest single-server cut (S = all but t) starts the iteration.
    tight = min(names, key=lambda t: inflow[t])
    x = inflow[tight] / (len(names) - 1)
    cut = frozenset(v for v in graph if v != tight)
    links = list(caps)
    nodes, servers, tail, head = _indexed(graph, links, names)
    source = len(nodes)
    # Integer capacities for the exact max-flow: the fastest link is PACKING_UNITS units, so
    # rounding down moves no capacity by more than 1 / PACKING_UNITS of the fastest link.
    scale = PACKING_UNITS / max(caps.values())
    units = np.floor(np.array([caps[e] for e in links]) * scale)
    changed = True
    while changed:
        changed = False
        per_server = math.floor(x * scale)
        net = _fed(source, tail, head, units, servers, per_server)
        enough = math.ceil(per_server * len(names) * (1 - PACKING_RTOL))
        for t in servers:
            _, reach = net.flow(source, t, enough)
            if reach is None:
                continue
            held = frozenset(nodes[i] for i in np.flatnonzero(reach[:source]))
            inside = sum(1 for v in held if v in inflow)
            leaving = sum(c for (a, b), c in caps.items() if a in held and b not in held)
            if leaving / inside < x:  # else the shortfall was the units' rounding
                x, cut = leaving / inside, held
                changed = True
                break
    return x, cut


#: The fastest link's capacity in the integer units of ``packing_rate``'s max-flows.
PACKING_UNITS = 1e12
#: ``packing_rate`` counts a flow as reaching x N when it falls short by less than this.
PACKING_RTOL = 1e-9


def tree_allreduce_rate(graph: nx.Graph, *, goodput: float = 1.0) -> tuple[float, bool]:
    """(x, overlapped): the best rate per server (bit/s) at which a tree AllReduce moves every
    shard both ways, so it takes (bits / N) / x, and whether that needs the ReduceScatter and
    the AllGather to run at once. x = max(x* / 2, ``overlap_rate``), x* = ``packing_rate``;
    the overlap LP is skipped where ReduceScatter then AllGather, 2 (bits / N) / x*, already
    meets the message-count bound (every uniform family). At least two servers."""
    rate, _ = packing_rate(graph, goodput=goodput)
    half = rate / 2
    n = len(servers_by_rank(graph))
    if 1.0 / (n * half) <= message_seconds_per_bit(graph, goodput=goodput) * (1 + OVERLAP_RTOL):
        return half, False
    both = overlap_rate(graph, goodput=goodput)
    if both > half * (1 + OVERLAP_RTOL):
        return both, True
    return half, False


#: Overlapping the phases counts only when it is faster by more than this (relative).
OVERLAP_RTOL = 1e-9


def overlap_rate(graph: nx.Graph, *, goodput: float = 1.0, rtol: float = 1e-6) -> float:
    """The optimal rate per server (bit/s) of a ReduceScatter and an AllGather that run at the
    same time, each by trees, sharing every directed link's capacity.

    A pipelined tree AllReduce reduces one chunk while it broadcasts an earlier one, so its
    ReduceScatter (in-trees to each root) and AllGather (out-trees from each root) overlap. It
    moves every shard both ways at rate x, so it takes (bits / N) / x. With one link rate on a
    graph where ``packing_rate`` x* meets the message-count bound the answer is x* / 2 (the
    overlap gains nothing), but where one direction of a thin cut idles in each phase (a
    server with one link: the AllGather fills its way in, the ReduceScatter its way out)
    overlapping gains up to 2 x.

    The linear programme: split every directed link's capacity c = c1 + c2, c1 balanced at
    every switch (what enters a switch leaves it), and maximise x such that the AllGather at
    rate x fits c1 and the ReduceScatter at rate x fits c2 reversed: for every node set S
    holding some but not all servers, c1 leaving S >= x |S ∩ servers| and c2 entering S >=
    x |S ∩ servers| (``packing_rate``'s cuts, exact for balanced capacities by Edmonds'
    theorem with switches split off). Solved by cutting planes: an LP over (x, c1) with the
    cuts found so far, then one max-flow per server and phase (as in ``packing_rate``) finds
    the cuts the solution violates, until none is (relative ``rtol``). The LP relaxes the
    problem until it stops, so the rate returned is never below the true one.
    """
    import numpy as np  # numpy, scipy, HiGHS: on use
    from scipy.sparse import csr_matrix

    from traffic.lp import INF, add_columns, add_rows, model, solve

    names = servers_by_rank(graph)
    n = len(names)
    if n < 2:
        raise ValueError("the overlap rate needs at least two servers")
    caps = link_capacities(graph, goodput)
    links = list(caps)
    m = len(links)
    scale = max(caps.values())
    cap = np.array([caps[e] / scale for e in links])
    nodes, servers, tail, head = _indexed(graph, links, names)
    source = len(nodes)
    is_server = np.zeros(len(nodes), dtype=bool)
    is_server[servers] = True
    # The LP over (x, c1), one HiGHS model: every round adds the cuts found as rows and goes
    # on from the last basis.
    lp = model()
    add_columns(lp, np.concatenate([[-1.0], np.zeros(m)]), np.zeros(1 + m),
                np.concatenate([[INF], cap]))
    rows: list[np.ndarray] = []
    lower: list[float] = []
    upper: list[float] = []

    def flush() -> None:
        if rows:
            add_rows(lp, lower, upper, csr_matrix(np.array(rows)))
            rows.clear()
            lower.clear()
            upper.clear()

    # Balance at every switch: in - out of c1 = 0.
    for w in np.flatnonzero(~is_server):
        row = np.zeros(1 + m)
        row[1:] = (head == w).astype(float) - (tail == w).astype(float)
        rows.append(row)
        lower.append(0.0)
        upper.append(0.0)
    cuts: set[tuple[int, bytes]] = set()

    def add_cut(phase: int, inside: np.ndarray) -> bool:
        key = (phase, inside.tobytes())
        if key in cuts:
            return False
        cuts.add(key)
        k = float(is_server[inside].sum())
        row = np.zeros(1 + m)
        row[0] = k
        if phase == 0:  # gather: c1 leaving S >= k x
            crossing = inside[tail] & ~inside[head]
            row[1:][crossing] = -1.0
            upper.append(0.0)
        else:  # scatter: (cap - c1) entering S >= k x
            crossing = ~inside[tail] & inside[head]
            row[1:][crossing] = 1.0
            upper.append(float(cap[crossing].sum()))
        rows.append(row)
        lower.append(-INF)
        return True

    for t in servers:
        alone = np.zeros(len(nodes), dtype=bool)
        alone[t] = True
        for phase in (0, 1):
            add_cut(phase, alone)
            add_cut(phase, ~alone)
    units = 1e7  # max-flow capacities are integers: the fastest link is this many units
    while True:
        flush()
        solve(lp, "overlap LP")
        solution = np.asarray(lp.getSolution().col_value)
        x, c1 = float(solution[0]), np.clip(solution[1:], 0.0, cap)
        per_server = int(np.floor(x * units))
        need = n * per_server
        if need == 0:
            raise ValueError("overlap_rate: link rates too far apart (the slowest cut is "
                             "below 1e-7 of the fastest link)")
        enough = math.ceil(need * (1 - rtol))
        added = False
        for phase, use in ((0, c1), (1, cap - c1)):
            # The phase's arcs: gather on the links, scatter on the links reversed.
            a, b = (tail, head) if phase == 0 else (head, tail)
            net = _fed(source, a, b, np.floor(use * units), servers, per_server)
            for t in servers:
                _, reach = net.flow(source, t, enough)
                if reach is not None:
                    added |= add_cut(phase, reach[:source])
        if not added:
            return x * scale


def _indexed(graph: nx.Graph, links: list[tuple[str, str]], names: list[str]):
    """The max-flows' numbering: (the nodes in graph order, the servers' (``names``) indexes,
    each link's tail and head index as int64 arrays); the source is node len(nodes)."""
    import numpy as np  # numpy: on use

    nodes = list(graph.nodes)
    index = {v: i for i, v in enumerate(nodes)}
    tail = np.array([index[a] for a, _ in links], dtype=np.int64)
    head = np.array([index[b] for _, b in links], dtype=np.int64)
    return nodes, [index[v] for v in names], tail, head


def _fed(source: int, tail, head, units, servers: list[int], per_server: int):
    """A ``traffic.maxflow.Network`` over nodes 0..source: the arcs tail -> head of ``units``
    each, and an arc of ``per_server`` units from ``source`` into every server."""
    import numpy as np  # numpy and the compiled max-flow: on use

    from traffic.maxflow import Network

    n = len(servers)
    return Network(source + 1, np.concatenate([tail, np.full(n, source)]),
                   np.concatenate([head, servers]),
                   np.concatenate([units, np.full(n, per_server)]))
