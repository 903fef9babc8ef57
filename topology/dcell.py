"""DCell(n, k): the recursive server-centric topology of Guo et al., SIGCOMM 2008."""

from __future__ import annotations

import networkx as nx

from topology._common import DEFAULT_BW_MBPS, check_bw, check_int, check_size, label


def dcell_sizes(n: int, k: int) -> list[int]:
    """Return [t_0, ..., t_k], the number of servers of DCell_0 .. DCell_k."""
    sizes = [n]
    for _ in range(k):
        sizes.append(sizes[-1] * (sizes[-1] + 1))
    return sizes


def _digits(uid: int, level: int, sizes: list[int]) -> tuple[int, ...]:
    """Index path (a_level, ..., a_0) of the server with ``uid`` inside a DCell_level."""
    digits = []
    for lvl in range(level, 0, -1):
        digits.append(uid // sizes[lvl - 1])
        uid %= sizes[lvl - 1]
    digits.append(uid)
    return tuple(digits)


def dcell_server(address: tuple[int, ...]) -> str:
    """Name of the DCell server with index path (a_k, ..., a_0), e.g. ``s2_1``."""
    return "s" + "_".join(str(d) for d in address)


def dcell_switch(address: tuple[int, ...]) -> str:
    """Name of the DCell_0 switch of a server (its index path without a_0), e.g. ``w2``."""
    return "w" + "_".join(str(d) for d in address[:-1])


def dcell_graph(n: int, k: int, bw_mbps: float = DEFAULT_BW_MBPS) -> nx.Graph:
    """Return the DCell(n, k) network as a graph of servers and switches.

    DCell_0 is one n-port switch with n servers. DCell_l is g_l = t_(l-1) + 1 copies of
    DCell_(l-1) in which every pair of copies i < j is joined by one server-server link,
    server [i, j-1] <-> server [j, i] (second index: uid inside the copy). Every server has
    k+1 links: one to its switch, one per level above 0. Servers relay.

    Counts: t_k servers, t_k / n switches, t_k server-switch + k t_k / 2 server-server links.

    Reference: C. Guo et al., "DCell: A Scalable and Fault-Tolerant Network Structure for Data
    Centers", SIGCOMM 2008.

    >>> g = dcell_graph(4, 1)
    >>> g.number_of_nodes(), g.number_of_edges()
    (25, 30)
    >>> sorted(g["s0_0"])
    ['s1_0', 'w0']
    """
    check_int("n", n, 2)
    check_int("k", k, 0)
    # t_k grows doubly exponentially: stop as soon as a level passes the cap.
    sizes = [n]
    for _ in range(k):
        check_size("DCell", sizes[-1])
        sizes.append(sizes[-1] * (sizes[-1] + 1))
    check_size("DCell", sizes[-1])
    bw = check_bw(bw_mbps)
    graph = nx.Graph()
    for rank in range(sizes[k]):
        address = _digits(rank, k, sizes)
        server = dcell_server(address)
        graph.add_node(server, role="server", rank=rank, address=address)
        switch = dcell_switch(address)
        if switch not in graph:
            graph.add_node(switch, role="switch")
        graph.add_edge(server, switch, bw_mbps=bw)
    for level in range(1, k + 1):
        cells = sizes[level - 1] + 1
        for high in range(sizes[k] // sizes[level]):
            prefix = _digits(high * sizes[level], k, sizes)[: k - level]
            for i in range(cells):
                for j in range(i + 1, cells):
                    a = prefix + (i,) + _digits(j - 1, level - 1, sizes)
                    b = prefix + (j,) + _digits(i, level - 1, sizes)
                    graph.add_edge(dcell_server(a), dcell_server(b), bw_mbps=bw)
    return label(graph, "dcell", {"n": n, "k": k}, bw)


def dcell_routing(graph: nx.Graph, src: str, dst: str) -> list[str]:
    """DCellRouting: the path that recurses through the one link joining the two sub-cells
    of the lowest DCell containing both servers; at most 2^(k+1) - 1 server hops.

    >>> g = dcell_graph(4, 1)
    >>> dcell_routing(g, "s0_1", "s2_3")
    ['s0_1', 's2_0', 'w2', 's2_3']
    """
    sizes = dcell_sizes(**graph.graph["spec"]["params"])
    return _route(graph.nodes[src]["address"], graph.nodes[dst]["address"], sizes)


def _route(a: tuple[int, ...], b: tuple[int, ...], sizes: list[int]) -> list[str]:
    if a == b:
        return [dcell_server(a)]
    k = len(a) - 1
    m = next(pos for pos in range(k + 1) if a[pos] != b[pos])
    if m == k:  # same DCell_0: through its switch
        return [dcell_server(a), dcell_switch(a), dcell_server(b)]
    level = k - m
    i, j = a[m], b[m]
    lo, hi = min(i, j), max(i, j)
    prefix = a[:m]
    n1 = prefix + (lo,) + _digits(hi - 1, level - 1, sizes)
    n2 = prefix + (hi,) + _digits(lo, level - 1, sizes)
    if i > j:
        n1, n2 = n2, n1
    return _route(a, n1, sizes) + _route(n2, b, sizes)
