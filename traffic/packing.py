"""Optimal tree packing for AllReduce on any graph (after ForestColl, arXiv 2402.06787).

Every server r broadcasts its shard over a few spanning trees of its own (AllGather) and the
same trees, reversed, reduce that shard into r (ReduceScatter). A tree is an overlay
arborescence over the servers whose edges are physical paths through nodes that may carry
traffic (switches; servers too where they relay), so a switch never copies data. The trees
and their rates come from a linear programme, solved by column generation:

    maximise x  subject to  sum of the rates of r's trees >= x          for every server r
                            sum of the rates of the trees using link e <= capacity(e)

whose pricing problem, the cheapest tree rooted at r under the links' dual prices, is a
minimum-cost arborescence (Edmonds) over the servers, each overlay edge costing its cheapest
physical path. Its optimum is the packing rate x* that ``traffic.cuts.packing_rate``
finds by max-flow (the fractional form of Edmonds' branching theorem once switches are split
off), and the iteration stops as soon as it reaches it. Multiplicative-weights trees seed the
master LP, so it starts near x* instead of tailing off towards it, and a last LP picks, among
the optimal weightings, the one with the shallowest trees.

Unlike ``multitree``, which spreads fixed tree or ring shapes evenly over the links and so
assumes one link rate, the packing reads every link's capacity, so a slow link carries
proportionally less. Pure: standard library, networkx, numpy, scipy (shortest paths)
and HiGHS (the LP, ``traffic.lp``); the arborescences are compiled (``traffic.arborescence``).
"""

from __future__ import annotations

import networkx as nx
import numpy as np
from scipy.sparse import csc_matrix, csr_matrix
from scipy.sparse.csgraph import dijkstra

from topology.links import relays
from topology.routing import servers as servers_by_rank
from traffic.arborescence import min_arborescence
from traffic.cuts import link_capacities, overlap_rate, packing_rate
from traffic.lp import INF, add_columns, add_rows, model, solve, solved
from traffic.overlay import Tree, depth
from traffic.schedule import segments
from traffic.trees import emit_tree

#: Column generation stops when the LP's rate is this close (relative) to the max-flow optimum.
RATE_RTOL = 1e-6
#: The pricing's stages: first trees whose every edge goes from fewer to more hops from the
#: root (height at most the root's eccentricity), then edges up to that many hops back
#: (Edmonds on the allowed edges), then any tree; the next stage starts when one stalls.
SLACKS = (0, 1, 2, 4, 8, None)
#: Trees per root and family that seed the master LP at the start of each pricing stage, and
#: how steeply the seeding's link prices rise with load (exp(SEED_SPREAD) between the least
#: and the most loaded link per unit of capacity).
SEED_ROUNDS = 16
SEED_SPREAD = 8.0
#: The final re-weighting (``_Master.shallowest``) keeps each root's rate within this (relative).
SHALLOW_RTOL = 1e-9
#: Trees whose rate is below this fraction of their root's total are dropped (LP round-off).
MIN_SHARE = 1e-6


class Packing:
    """A packing of weighted spanning trees: ``trees[r]`` lists (rate in bit/s, Tree) for
    server r, ``rate`` is the smallest total over the roots (the AllGather rate per server)
    and ``optimum`` the bound it was solved against. ``reduce_trees[r]``, when not None,
    lists the trees r's shard is reduced up (``trees[r]`` then only broadcasts it)."""

    def __init__(self, trees: dict[str, list[tuple[float, Tree]]], rate: float,
                 optimum: float, iterations: int,
                 reduce_trees: dict[str, list[tuple[float, Tree]]] | None = None) -> None:
        self.trees = trees
        self.reduce_trees = reduce_trees
        self.rate = rate
        self.optimum = optimum
        self.iterations = iterations
        #: Heights of the trees, by id (with the tree, so the id stays its own).
        self._heights: dict[tuple[int, str], tuple[Tree, int]] = {}

    def height(self, tree: Tree, root: str) -> int:
        """Height in server hops of one of this packing's trees rooted at ``root``."""
        key = (id(tree), root)
        if key not in self._heights:
            self._heights[key] = tree, depth(tree, root)
        return self._heights[key][1]

    def top(self, count: int | None) -> Packing:
        """This packing with only each root's ``count`` heaviest trees of each family (all
        when None); the rates stay the LP's."""
        def keep(family):
            return {r: sorted(items, key=lambda t: -t[0])[:count] for r, items in family.items()}
        if count is None:
            return self
        kept = Packing(keep(self.trees), self.rate, self.optimum, self.iterations,
                       None if self.reduce_trees is None else keep(self.reduce_trees))
        kept._heights = self._heights
        return kept

    def families(self) -> list[dict[str, list[tuple[float, Tree]]]]:
        """The tree families: the broadcast trees, then the reduce trees where they differ."""
        return [self.trees] + ([] if self.reduce_trees is None else [self.reduce_trees])


class _Network:
    """The directed links as a sparse matrix, with servers split into a sending copy (out
    links only) and a receiving node (in links, plus out links where servers relay), so that a
    shortest path never passes through a server that may not relay."""

    def __init__(self, graph: nx.Graph, goodput: float) -> None:
        self.servers = servers_by_rank(graph)
        nodes = list(graph.nodes)
        self.index = {v: i for i, v in enumerate(nodes)}
        self.names = nodes + [f"{v}>" for v in self.servers]
        self.sender = {v: len(nodes) + i for i, v in enumerate(self.servers)}
        relay = relays(graph)
        is_server = set(self.servers)
        caps = link_capacities(graph, goodput)
        self.links: list[tuple[str, str]] = list(caps)
        self.cap = np.array(list(caps.values()))
        rows, cols, ids = [], [], []
        for e, (u, v) in enumerate(self.links):
            if u in is_server:
                rows.append(self.sender[u])
                cols.append(self.index[v])
                ids.append(e)
                if not relay:
                    continue
            rows.append(self.index[u])
            cols.append(self.index[v])
            ids.append(e)
        self.rows, self.cols = np.array(rows), np.array(cols)
        self.link_of = np.array(ids)
        self.size = len(self.names)
        edge_at = np.full((self.size, self.size), -1, dtype=np.int64)
        edge_at[self.rows, self.cols] = ids
        self.edge_at: list[list[int]] = edge_at.tolist()  # (node, node) -> link id

    def paths(self, price: np.ndarray) -> tuple[np.ndarray, list[list[int]]]:
        """Cheapest paths from every server's sending copy under ``price`` per link (a hop
        costs a little too, so free links still give short paths): (cost matrix servers x
        servers, predecessors: row per server, entry per node)."""
        hop = max(float(price.max()), 1.0) * 1e-9
        weight = price[self.link_of] + hop
        matrix = csr_matrix((weight, (self.rows, self.cols)), shape=(self.size, self.size))
        senders = [self.sender[v] for v in self.servers]
        dist, pred = dijkstra(matrix, indices=senders, return_predecessors=True)
        receivers = [self.index[v] for v in self.servers]
        return dist[:, receivers], pred.tolist()

    def hops(self) -> np.ndarray:
        """Links on the shortest allowed path between every two servers (servers x servers)."""
        matrix = csr_matrix((np.ones(len(self.rows)), (self.rows, self.cols)),
                            shape=(self.size, self.size))
        dist = dijkstra(matrix, indices=[self.sender[v] for v in self.servers],
                        unweighted=True)
        dist = dist[:, [self.index[v] for v in self.servers]]
        np.fill_diagonal(dist, 0.0)
        return dist

    def path(self, pred: list[list[int]], src: int, dst: str) -> list[int]:
        """Link ids of the cheapest path from server number ``src`` to ``dst`` (``pred``: as
        ``paths`` gives it)."""
        out, node = [], self.index[dst]
        start = self.sender[self.servers[src]]
        back = pred[src]
        while node != start:
            out.append(self.edge_at[back[node]][node])
            node = back[node]
        return out[::-1]


def _cheapest_tree(net: _Network, root: int, cost: np.ndarray, pred: list[list[int]],
                   level: np.ndarray | None = None, slack: int = 0,
                   paths: dict | None = None) -> dict[str, tuple[str, list[int]]]:
    """The minimum-cost arborescence over the servers rooted at server number ``root``, each
    overlay edge u -> v costing its cheapest path: {server: (parent, link ids from it)}.
    With ``level`` (hops from the root), only edges from a lower to a higher level count:
    the cheapest such tree is every server's cheapest parent above it, and its height is
    at most the root's eccentricity. ``paths``: the link ids of the (parent, server) paths
    under ``pred`` found so far, shared between the roots of one pricing (read only)."""
    names = net.servers
    if level is None:
        parent = min_arborescence(cost, root)
    elif slack == 0:
        allowed = np.where(level[:, None] < level[None, :], cost, np.inf)
        parent = np.argmin(allowed, axis=0)
        parent[root] = -1
    else:
        allowed = np.where(level[:, None] < level[None, :] + slack, cost, np.inf)
        parent = min_arborescence(allowed, root)
    paths = {} if paths is None else paths
    tree = {}
    for v, p in enumerate(parent.tolist()):
        if p >= 0:
            if (p, v) not in paths:
                paths[p, v] = net.path(pred, p, names[v])
            tree[names[v]] = (names[p], paths[p, v])
    return tree


def _as_tree(net: _Network, links: dict[str, tuple[str, list[int]]]) -> Tree:
    """An overlay Tree (each server -> its parent and the node path up to it) from the
    parent links of an arborescence."""
    tree: Tree = {}
    for v, (parent, ids) in links.items():
        nodes = [parent] + [net.links[e][1] for e in ids]
        tree[v] = (parent, tuple(reversed(nodes)))
    return tree


def pack_trees(graph: nx.Graph, *, goodput: float = 1.0, max_iterations: int = 500,
               optimum: float | None = None, overlap: bool = False) -> Packing:
    """The optimal packing of broadcast trees (one or more per server) on ``graph``.

    Column generation. Each pricing stage (SLACKS: shallow trees first, a shallow tree
    pipelines in fewer steps) starts by adding SEED_ROUNDS trees per root found by
    multiplicative weights (``_seed``); most graphs' first seeds already reach the optimum.
    Else each round adds, for every root whose cheapest tree of the stage under the LP's
    dual prices costs less than its dual, that tree; a stage ends when no root finds one.
    The master LP is one HiGHS model (``_Master``) that goes on from its last basis. Stops
    at the max-flow optimum (``traffic.cuts.packing_rate``, within RATE_RTOL), when the last
    stage ends, or after ``max_iterations`` rounds; ``Packing.rate`` says what was reached.
    The rates are then re-weighted to the least total weight x height at that rate
    (``_Master.shallowest``).
    ``optimum``: x* when the caller has it already (bit/s per server, at this goodput).

    ``overlap``: pack a second family, the trees every shard is reduced up, in the same LP
    (a row per root and family; both families share every directed link), so that the
    ReduceScatter and the AllGather run at once at the rate ``traffic.cuts.overlap_rate``
    (the default ``optimum`` then). A reduce tree is priced as a broadcast tree under the
    reversed links' prices and uses the reversed links.
    """
    if optimum is None:
        optimum = (overlap_rate(graph, goodput=goodput) if overlap
                   else packing_rate(graph, goodput=goodput)[0])
    net = _Network(graph, goodput)
    n = len(net.servers)
    families = 2 if overlap else 1
    position = {e: i for i, e in enumerate(net.links)}
    reverse = np.array([position[(b, a)] for a, b in net.links])
    scale = float(net.cap.max())
    cap = net.cap / scale
    # (row: root + family * n, link use counts as a list of ids)
    columns: list[tuple[int, list[int]]] = []
    trees: list[dict[str, tuple[str, list[int]]]] = []
    hops = net.hops()
    _seed(net, hops, cap, reverse, families, SLACKS[0], columns, trees)
    rows = families * n
    # Most graphs' seeds reach the optimum: then the final re-weighting at the optimum is
    # the only LP. Where it is infeasible the seeds fall short, and column generation runs
    # on the same HiGHS model, each round going on from the last basis.
    master = _Master(cap, rows, optimum / scale)
    master.add(columns)
    iterations = 0
    heights = _heights(net, columns, trees)
    weights = master.shallowest(heights, optimum / scale * (1 - SHALLOW_RTOL))
    if weights is None:
        rate, iterations = _generate(net, hops, cap, reverse, families, columns, trees, master,
                                     optimum / scale, max_iterations)
        heights += _heights(net, columns[len(heights):], trees[len(heights):])
        weights = master.shallowest(heights, rate * (1 - SHALLOW_RTOL))
        if weights is None:
            raise RuntimeError("the packing LP failed: no weights at the master LP's rate")
    packed: list[dict[str, list]] = [{v: [] for v in net.servers} for _ in range(families)]
    for (row, _), links, w in zip(columns, trees, weights):
        packed[row // n][net.servers[row % n]].append((w * scale, links))
    result: list[dict[str, list[tuple[float, Tree]]]] = []
    for family in packed:
        kept = {}
        for v, items in family.items():
            total = sum(w for w, _ in items)
            kept[v] = [(w, _as_tree(net, links)) for w, links in items
                       if w > MIN_SHARE * total]
        result.append(kept)
    reached = min(sum(w for w, _ in items) for family in result for items in family.values())
    return Packing(result[0], reached, optimum, iterations,
                   result[1] if overlap else None)


def _generate(net: _Network, hops: np.ndarray, cap: np.ndarray, reverse: np.ndarray,
              families: int, columns: list, trees: list, master: _Master, optimum: float,
              max_iterations: int) -> tuple[float, int]:
    """Column generation from the seeds of the first stage in ``columns`` and ``trees``
    (appended to, and added to ``master``) until the master LP reaches ``optimum`` (in
    units of the fastest link, within RATE_RTOL), the last stage ends or ``max_iterations``
    rounds: (the master LP's rate, rounds)."""
    stages = list(SLACKS[1:])
    slack = SLACKS[0]
    rate, price, dual = master.solve()
    center, best_bound = None, np.inf
    iterations = 0
    while rate < optimum * (1 - RATE_RTOL) and iterations < max_iterations:
        iterations += 1
        # Wentges smoothing: price at a point between the LP's duals and the duals that gave
        # the best upper bound so far, which stops the degenerate LP's duals from jumping
        # between vertices without progress; price at the LP's own duals when that finds
        # nothing.
        added = 0
        for point in ([price] if center is None else [0.5 * (center + price), price]):
            found, uses = _cheapest_trees(net, point, hops, slack, reverse, families)
            spent = [float(point[use].sum()) for use in uses]
            if sum(spent) > 0:
                bound = float(cap @ point) / sum(spent)  # the dual value of (point, spent)
                if bound < best_bound:
                    center, best_bound = point, bound
            for row, (links, use) in enumerate(zip(found, uses)):
                if float(price[use].sum()) >= dual[row] * (1 - 1e-9):
                    continue
                columns.append((row, use))
                trees.append(links)
                added += 1
            if added:
                break
        if not added:
            if not stages:
                break
            slack = stages.pop(0)
            _seed(net, hops, cap, reverse, families, slack, columns, trees)
        master.add(columns[master.columns:])
        rate, price, dual = master.solve()
    return rate, iterations


def _seed(net: _Network, hops: np.ndarray, cap: np.ndarray, reverse: np.ndarray,
          families: int, slack: int | None, columns: list, trees: list) -> None:
    """Append SEED_ROUNDS trees per root and family to ``columns`` and ``trees``: every round
    prices each link exponentially in the load the trees so far put on it per unit of
    capacity (multiplicative weights, as in Garg-Koenemann's packing), so the trees spread
    over the links. A master LP over these starts next to the optimum, where column
    generation from one tree per root starts far below it and tails off."""
    load = np.zeros(len(cap))
    for _ in range(SEED_ROUNDS):
        top = max(float(load.max()), 1e-300)
        price = np.exp(SEED_SPREAD * (load / top - 1.0)) / cap
        found, uses = _cheapest_trees(net, price, hops, slack, reverse, families)
        for row, (links, use) in enumerate(zip(found, uses)):
            columns.append((row, use))
            trees.append(links)
            np.add.at(load, use, 1.0 / cap[use])


def _cheapest_trees(net: _Network, price: np.ndarray, hops: np.ndarray, slack: int | None,
                    reverse: np.ndarray, families: int) -> tuple[list, list[list[int]]]:
    """Every root's cheapest tree of the pricing stage ``slack`` under ``price`` per link,
    per family (reduce trees priced on the reversed links), in row order (root + family x
    N): (parent links of each tree, the link ids each uses, with repeats)."""
    found, uses = [], []
    for family in range(families):
        cost, pred = net.paths(price if family == 0 else price[reverse])
        paths: dict = {}
        for r in range(len(net.servers)):
            links = _cheapest_tree(net, r, cost, pred,
                                   None if slack is None else hops[r], slack or 0, paths)
            ids = [e for _, ids in links.values() for e in ids]
            found.append(links)
            uses.append(ids if family == 0 else [int(reverse[e]) for e in ids])
    return found, uses


def _uses(columns: list[tuple[int, list[int]]], n: int, m: int) -> csc_matrix:
    """Tree columns of the master LP: a sparse (n + m) x k matrix with -1 in the tree's root
    row and its use count in every link's row (n + link id)."""
    k = len(columns)
    lens = np.array([len(ids) for _, ids in columns], dtype=np.int64)
    links = np.concatenate([np.asarray(ids, dtype=np.int64) for _, ids in columns])
    rows = np.concatenate([[r for r, _ in columns], n + links])
    cols = np.concatenate([np.arange(k), np.repeat(np.arange(k), lens)])
    data = np.concatenate([np.full(k, -1.0), np.ones(len(links))])
    return csc_matrix((data, (rows, cols)), shape=(n + m, k))


class _Master:
    """The master LP, kept in one HiGHS model so that each ``solve`` after new columns goes
    on from the last basis: column 0 is the rate x (0 <= x <= the optimum), the others are
    tree weights.

        maximise x  subject to  x - sum of the weights of r's trees <= 0   for every root r
                                sum of the uses of link e by the trees <= capacity(e)

    ``shallowest`` fixes x and minimises the total weight x height instead."""

    def __init__(self, cap: np.ndarray, n: int, optimum: float) -> None:
        self.n, self.columns, self.optimum = n, 0, optimum
        self.lp = model()
        m = len(cap)
        add_rows(self.lp, np.full(n + m, -INF), np.concatenate([np.zeros(n), cap]))
        rate = csc_matrix((np.ones(n), (np.arange(n), np.zeros(n, dtype=np.int64))),
                          shape=(n + m, 1))
        add_columns(self.lp, [-1.0], [0.0], [optimum], rate)
        self.heights = False  # whether the objective is the heights' (``shallowest``)

    def add(self, columns: list[tuple[int, list[int]]]) -> None:
        """Add tree columns (row: root + family x N, link ids with repeats)."""
        if not columns:
            return
        k = len(columns)
        add_columns(self.lp, np.zeros(k), np.zeros(k), np.full(k, INF),
                    _uses(columns, self.n, self.lp.getNumRow() - self.n))
        self.columns += k

    def solve(self) -> tuple[float, np.ndarray, np.ndarray]:
        """(rate, link prices, root duals) of the LP over the columns added so far."""
        if self.heights:  # back from ``shallowest``: its basis is no start for this LP
            self.lp.clearSolver()
            self._objective(0.0, self.optimum, -1.0, np.zeros(self.columns))
        solve(self.lp, "packing LP")
        solution = self.lp.getSolution()
        dual = -np.asarray(solution.row_dual)
        return (float(solution.col_value[0]), np.maximum(dual[self.n:], 0.0),
                np.maximum(dual[:self.n], 0.0))

    def shallowest(self, heights: list[int], rate: float) -> np.ndarray | None:
        """Tree weights that give every root ``rate`` within the links' capacities at the
        least total weight x height: of the master LP's many optimal vertices, one whose
        trees pipeline in fewest steps. None when HiGHS finds none (the trees cannot give
        every root ``rate``, or HiGHS could not tell)."""
        # Solved afresh: primal simplex from the max-rate basis is faster, but it ends at
        # other optimal vertices, whose trees pipeline worse or better by luck (agent/README,
        # Inference).
        self.lp.clearSolver()
        self._objective(rate, rate, 0.0, np.asarray(heights, dtype=float))
        if not solved(self.lp):
            return None
        return np.asarray(self.lp.getSolution().col_value[1:])

    def _objective(self, low: float, high: float, rate_cost: float, costs: np.ndarray) -> None:
        self.lp.changeColBounds(0, low, high)
        self.lp.changeColCost(0, rate_cost)
        k = self.columns
        self.lp.changeColsCost(k, np.arange(1, k + 1, dtype=np.int32), costs)
        self.heights = rate_cost == 0.0


def _heights(net: _Network, columns: list[tuple[int, list[int]]], trees: list) -> list[int]:
    """Every column's tree height (server hops from its root to its deepest server)."""
    n = len(net.servers)
    return [depth(_as_tree(net, links), net.servers[row % n])
            for (row, _), links in zip(columns, trees)]


def split(count: int, weights: list[float]) -> list[int]:
    """``count`` cut into whole parts proportional to ``weights`` (largest remainders)."""
    total = sum(weights)
    exact = [count * w / total for w in weights]
    parts = [int(x) for x in exact]
    order = sorted(range(len(weights)), key=lambda i: (parts[i] - exact[i], i))
    for i in order[:count - sum(parts)]:
        parts[i] += 1
    return parts


#: Pipeline chunks per server hop of a tree's height: the fill and drain of a tree cost about
#: 1 / CHUNKS_PER_HOP of its time.
CHUNKS_PER_HOP = 8
#: Smallest message a tree copy is cut into, in bytes.
MIN_CHUNK_BYTES = 4096
#: Most transfers a tree packing's schedule may have (chunks are cut back to fit).
MAX_TRANSFERS = 120_000
#: Copies of the trees per root: many equal copies running side by side get about equal
#: shares of the links they have in common under max-min sharing, so a tree with copies in
#: proportion to its rate gets about its rate.
COPIES = 4
#: Chunks of the smallest message per copy below which ``packing_plan`` makes fewer copies.
MIN_CHUNKS_PER_COPY = 8


def rate_parts(items: list[tuple[float, Tree]], count: int, copies: int
               ) -> list[tuple[Tree, int]]:
    """(tree, elements) of every copy when a root's ``count`` elements are cut among its
    weighted trees in proportion to their rates (``split``), so each tree carries exactly
    its share of the LP's link loads, and each tree's part into max(1, round(``copies`` x
    its rate / the root's)) equal copies. Parts follow each other in the shard, in the
    order of ``items``; empty ones are left out.

    >>> rate_parts([(3.0, "a"), (1.0, "b")], 8, 4)
    [('a', 2), ('a', 2), ('a', 2), ('b', 2)]
    """
    total = sum(w for w, _ in items)
    parts = []
    for (w, tree), share in zip(items, split(count, [w for w, _ in items])):
        parts += [(tree, cnt) for _, cnt in segments(share, max(1, round(copies * w / total)))
                  if cnt]
    return parts


def _paired(up: list[tuple[Tree, int]], down: list[tuple[Tree, int]]
            ) -> list[tuple[Tree, Tree, int]]:
    """(reduce tree, broadcast tree, elements) of the pieces of a shard cut wherever either
    family's parts (``rate_parts``, both over the same elements) begin: up to
    len(up) + len(down) - 1 pieces, some smaller than either family's parts. Empty when
    either list is."""
    if not up or not down:
        return []
    pieces = []
    i = j = 0
    left_up, left_down = up[0][1], down[0][1]
    while i < len(up) and j < len(down):
        step = min(left_up, left_down)
        pieces.append((up[i][0], down[j][0], step))
        left_up -= step
        left_down -= step
        if not left_up:
            i += 1
            left_up = up[i][1] if i < len(up) else 0
        if not left_down:
            j += 1
            left_down = down[j][1] if j < len(down) else 0
    return pieces


def packing_plan(packing: Packing, elements: int, *, copies: int = COPIES,
                 chunks_per_hop: float = CHUNKS_PER_HOP, min_chunk: int = 1,
                 max_transfers: int | None = None
                 ) -> list[tuple[Tree, Tree, str, int, int, int]]:
    """What ``emit_packing`` emits, one entry per piece of a shard: (reduce tree, broadcast
    tree, root, offset, elements, chunks). Every server's shard (``segments(elements, N)`` by
    rank) is cut among its trees in proportion to their rates, each tree's part into copies
    in proportion to its rate, about ``copies`` per root and at least one per tree, fewer
    where the shard holds less than MIN_CHUNKS_PER_COPY chunks of ``min_chunk`` per copy
    (``rate_parts``); with ``packing.reduce_trees`` the reduce and the broadcast family's
    parts are paired where either begins (``_paired``), so a root can have up to about
    twice as many pieces. Each piece is pipelined in max(1, ``chunks_per_hop`` x height)
    chunks of at least ``min_chunk`` elements, fewer where the schedule would pass
    ``max_transfers`` (default MAX_TRANSFERS; every piece keeps one chunk at least)."""
    names = list(packing.trees)
    plan = []
    for (offset, count), root in zip(segments(elements, len(names)), names):
        # one copy per MIN_CHUNKS_PER_COPY chunks of the floor at most: where the floor
        # binds, a copy's pipeline depth is worth more than a finer spread of the copies
        fit = max(1, min(copies, count // (min_chunk * MIN_CHUNKS_PER_COPY)))
        down = rate_parts(packing.trees[root], count, fit)
        up = down if packing.reduce_trees is None else rate_parts(
            packing.reduce_trees[root], count, fit)
        off = offset
        for tree, down_tree, cnt in _paired(up, down):  # every piece holds elements
            height = max(packing.height(tree, root), packing.height(down_tree, root))
            chunks = max(1, min(int(chunks_per_hop * height), cnt // min_chunk))
            plan.append((tree, down_tree, root, off, cnt, chunks))
            off += cnt
    per_chunk = 2 * (len(names) - 1)
    budget = MAX_TRANSFERS if max_transfers is None else max_transfers
    total = per_chunk * sum(chunks for *_, chunks in plan)
    scale = min(1.0, budget / total) if total else 1.0
    return [(tree, down_tree, root, off, cnt, max(1, int(chunks * scale)))
            for tree, down_tree, root, off, cnt, chunks in plan]


def emit_packing(builder, packing: Packing, elements: int, **options) -> None:
    """Reduce every server's shard up its trees into it and broadcast it back down
    (``traffic.trees.emit_tree``), as ``packing_plan(packing, elements, **options)`` cuts
    it."""
    for tree, down_tree, root, off, cnt, chunks in packing_plan(packing, elements, **options):
        emit_tree(builder, tree, root, off, cnt, chunks, down_tree)
