"""Jellyfish: a random regular graph of top-of-rack switches (Singla et al., NSDI 2012)."""

from __future__ import annotations

import random

import networkx as nx

from topology._common import DEFAULT_BW_MBPS, check_bw, check_int, check_size, label

#: How many independent samples to draw before giving up on a connected switch graph.
MAX_RESAMPLES = 100


def _pick_pair(
    open_ports: list[int], adjacent: dict[int, set[int]], rng: random.Random
) -> tuple[int, int] | None:
    """A uniformly random non-adjacent pair of switches with free ports, or None.

    Rejection sampling is uniform over the valid pairs and fast while most pairs are valid;
    the full enumeration settles the end game, when few or none are."""
    if len(open_ports) < 2:
        return None
    for _ in range(64):
        u, v = rng.sample(open_ports, 2)
        if v not in adjacent[u]:
            return u, v
    pairs = [
        (u, v)
        for i, u in enumerate(open_ports)
        for v in open_ports[i + 1 :]
        if v not in adjacent[u]
    ]
    return rng.choice(pairs) if pairs else None


def _random_regular(switches: int, uplinks: int, rng: random.Random) -> set[tuple[int, int]]:
    """The paper's incremental construction: link random non-adjacent switches with free
    ports; when a switch is left with >= 2 free ports, break a random link (x, y) and join
    both ends to it (and likewise for two adjacent switches with one free port each). Yields
    an r-regular graph (near-regular when switches * uplinks is odd)."""
    free = dict.fromkeys(range(switches), uplinks)
    adjacent: dict[int, set[int]] = {v: set() for v in range(switches)}

    def link(u: int, v: int) -> None:
        adjacent[u].add(v)
        adjacent[v].add(u)
        free[u] -= 1
        free[v] -= 1

    while True:
        open_ports = [v for v in range(switches) if free[v] > 0]
        pair = _pick_pair(open_ports, adjacent, rng)
        if pair is not None:
            link(*pair)
            continue
        # No linkable pair is left. Free ports on two switches u, v (u == v when one switch
        # has >= 2) are placed by breaking a random link (x, y) and linking u-x and v-y.
        stuck = [v for v in open_ports if free[v] >= 2]
        if stuck:
            u = v = rng.choice(stuck)
        elif len(open_ports) >= 2:
            u, v = rng.sample(open_ports, 2)
        else:
            break
        edges = [
            (x, y)
            for x in range(switches)
            for y in sorted(adjacent[x])
            if x != y
            and not {x, y} & {u, v}
            and x not in adjacent[u]
            and y not in adjacent[v]
        ]
        if not edges:
            break
        x, y = rng.choice(edges)
        adjacent[x].discard(y)
        adjacent[y].discard(x)
        free[x] += 1
        free[y] += 1
        link(u, x)
        link(v, y)
    return {(u, v) for u in adjacent for v in adjacent[u] if u < v}


def jellyfish_graph(
    switches: int,
    ports: int,
    uplinks: int,
    seed: int = 0,
    bw_mbps: float = DEFAULT_BW_MBPS,
) -> nx.Graph:
    """Return the Jellyfish RRG(N, k, r) network: N switches of k ports, r of them to other
    switches (a random r-regular switch graph), k - r to one server each. Servers do not
    relay. The graph is resampled with the same seeded generator until it is connected.

    Counts: N (k - r) servers, N r / 2 switch-switch links, N (k - r) server links.

    Reference: A. Singla et al., "Jellyfish: Networking Data Centers Randomly", NSDI 2012.

    >>> g = jellyfish_graph(16, 4, 3, seed=0)
    >>> g.number_of_edges(), sorted(g["s0_0"])
    (40, ['w0'])
    """
    check_int("switches", switches, 2)
    check_int("uplinks", uplinks, 3)
    check_int("ports", ports, uplinks + 1)
    check_int("seed", seed, 0)
    if uplinks >= switches:
        raise ValueError(f"uplinks must be < switches ({switches}), got {uplinks}")
    check_size("Jellyfish", switches * (ports - uplinks))
    bw = check_bw(bw_mbps)
    rng = random.Random(seed)
    for _ in range(MAX_RESAMPLES):
        edges = _random_regular(switches, uplinks, rng)
        core = nx.Graph(edges)
        core.add_nodes_from(range(switches))
        if nx.is_connected(core):
            break
    else:
        raise ValueError(
            f"no connected Jellyfish({switches}, {ports}, {uplinks}) in {MAX_RESAMPLES} samples"
            f" from seed {seed}"
        )
    graph = nx.Graph()
    rank = 0
    for i in range(switches):
        graph.add_node(f"w{i}", role="switch")
    for i in range(switches):
        for j in range(ports - uplinks):
            server = f"s{i}_{j}"
            graph.add_node(server, role="server", rank=rank)
            graph.add_edge(server, f"w{i}", bw_mbps=bw)
            rank += 1
    for u, v in sorted(edges):
        graph.add_edge(f"w{u}", f"w{v}", bw_mbps=bw)
    return label(
        graph, "jellyfish",
        {"switches": switches, "ports": ports, "uplinks": uplinks, "seed": seed}, bw,
    )
