"""BCube(n, k): the server-centric recursive topology of Guo et al., SIGCOMM 2009."""

from __future__ import annotations

import itertools

import networkx as nx

from topology._common import DEFAULT_BW_MBPS, check_bw, check_int, check_size, label


def _digits_name(prefix: str, digits: tuple[int, ...], n: int) -> str:
    sep = "_" if n > 10 else ""
    return prefix + sep.join(str(d) for d in digits)


def bcube_server(address: tuple[int, ...], n: int) -> str:
    """Name of the BCube server with address digits (a_k, ..., a_0), e.g. ``s13``."""
    return _digits_name("s", address, n)


def bcube_switch(level: int, address: tuple[int, ...], n: int) -> str:
    """Name of the level-``level`` switch that joins the servers agreeing with ``address``
    on every digit but digit ``level``, e.g. ``w0_1`` for s10..s13 in BCube(4, 1)."""
    k = len(address) - 1
    rest = tuple(d for pos, d in enumerate(address) if k - pos != level)
    if not rest:
        return f"w{level}"
    return f"w{level}_" + _digits_name("", rest, n)


def bcube_graph(n: int, k: int, bw_mbps: float = DEFAULT_BW_MBPS) -> nx.Graph:
    """Return the BCube(n, k) network as a graph of servers and switches.

    BCube_0 is one n-port switch with n servers; BCube_k is n copies of BCube_(k-1) and n^k
    level-k switches. A server has an address a_k..a_0 with digits in [0, n) and k+1 ports:
    port l goes to the level-l switch that joins the n servers differing from it only in
    digit l. There are no switch-switch or server-server links; servers relay.

    Counts: n^(k+1) servers, (k+1) n^k switches, (k+1) n^(k+1) links.

    Reference: C. Guo et al., "BCube: A High Performance, Server-centric Network Architecture
    for Modular Data Centers", SIGCOMM 2009.

    >>> g = bcube_graph(4, 1)
    >>> sum(1 for _, r in g.nodes(data="role") if r == "server"), g.number_of_edges()
    (16, 32)
    >>> sorted(g["s13"])
    ['w0_1', 'w1_3']
    """
    check_int("n", n, 2)
    check_int("k", k, 0)
    check_size("BCube", n ** (k + 1))
    bw = check_bw(bw_mbps)
    graph = nx.Graph()
    for rank, address in enumerate(itertools.product(range(n), repeat=k + 1)):
        server = bcube_server(address, n)
        graph.add_node(server, role="server", rank=rank, address=address)
        for level in range(k + 1):
            switch = bcube_switch(level, address, n)
            if switch not in graph:
                graph.add_node(switch, role="switch", level=level)
            graph.add_edge(server, switch, bw_mbps=bw)
    return label(graph, "bcube", {"n": n, "k": k}, bw)


def bcube_routing(graph: nx.Graph, src: str, dst: str, order: list[int]) -> list[str]:
    """BCubeRouting: correct the differing digits of src in ``order`` (levels), one switch hop
    per digit, and return the node path src, switch, relay, ..., dst."""
    n, k = graph.graph["spec"]["params"]["n"], graph.graph["spec"]["params"]["k"]
    address = list(graph.nodes[src]["address"])
    target = graph.nodes[dst]["address"]
    path = [src]
    for level in order:
        pos = k - level
        if address[pos] == target[pos]:
            continue
        path.append(bcube_switch(level, tuple(address), n))
        address[pos] = target[pos]
        path.append(bcube_server(tuple(address), n))
    return path


def build_path_set(graph: nx.Graph, src: str, dst: str) -> list[list[str]]:
    """BuildPathSet: k+1 node-disjoint paths from src to dst in BCube(n, k).

    For each level i where the addresses differ, correct digits in the order i, i-1, ..., 0,
    k, ..., i+1 (a path of the same length as the shortest one). For each level i where they
    agree, first step aside to the neighbour differing in digit i (a digit chosen so paths
    stay disjoint), route from there in the rotated order, then correct digit i back
    (a path two hops longer).

    >>> g = bcube_graph(4, 1)
    >>> build_path_set(g, "s00", "s13")
    [['s00', 'w1_0', 's10', 'w0_1', 's13'], ['s00', 'w0_0', 's03', 'w1_3', 's13']]
    """
    n, k = graph.graph["spec"]["params"]["n"], graph.graph["spec"]["params"]["k"]
    a = graph.nodes[src]["address"]
    b = graph.nodes[dst]["address"]
    paths = []
    for i in range(k, -1, -1):
        order = [(i - j) % (k + 1) for j in range(k + 1)]
        pos = k - i
        if a[pos] != b[pos]:
            paths.append(bcube_routing(graph, src, dst, order))
            continue
        # Step aside on level i to a neighbour whose digit i differs; the paper picks
        # (a_i + 1) mod n, which keeps the detours of different levels disjoint.
        aside = list(a)
        aside[pos] = (a[pos] + 1) % n
        neighbour = bcube_server(tuple(aside), n)
        first = [src, bcube_switch(i, a, n), neighbour]
        middle = bcube_routing(graph, neighbour, dst, order[1:] + [i])
        paths.append(first + middle[1:])
    return paths
