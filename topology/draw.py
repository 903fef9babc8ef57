"""Drawing a topology to a PNG file (matplotlib, imported only when drawing)."""

from __future__ import annotations

import networkx as nx

from topology.routing import servers, switches


def _layout(graph: nx.Graph) -> dict:
    """Servers on a row at the bottom, switches above them: level by level for BCube, one row
    for DCell and Jellyfish; each node over the mean position of its servers."""
    srv = servers(graph)
    pos = {v: (i, 0.0) for i, v in enumerate(srv)}
    levels: dict[int, list[str]] = {}
    for w in switches(graph):
        levels.setdefault(graph.nodes[w].get("level", 0), []).append(w)
    width = max(len(srv) - 1, 1)
    for level, row in sorted(levels.items()):
        for i, w in enumerate(row):
            x = width * (i + 0.5) / len(row)
            pos[w] = (x, 1.0 + level)
    return pos


def draw_png(graph: nx.Graph, path: str) -> None:
    """Draw ``graph`` into the PNG file ``path``: servers as blue circles, switches as orange
    squares, labelled by name (labels are left out above 64 servers)."""
    try:
        import matplotlib
    except ImportError:
        raise ValueError("drawing needs matplotlib: pip install matplotlib") from None

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    pos = _layout(graph)
    srv, sw = servers(graph), switches(graph)
    width = min(max(6.0, 0.45 * len(srv)), 40.0)
    height = 3.0 + 1.2 * (1 + max((graph.nodes[w].get("level", 0) for w in sw), default=0))
    fig, ax = plt.subplots(figsize=(width, height))
    nx.draw_networkx_edges(graph, pos, ax=ax, alpha=0.35, width=0.8)
    nx.draw_networkx_nodes(graph, pos, nodelist=srv, node_shape="o", node_color="#4c78a8",
                           node_size=260, ax=ax, label="server")
    nx.draw_networkx_nodes(graph, pos, nodelist=sw, node_shape="s", node_color="#f58518",
                           node_size=320, ax=ax, label="switch")
    if len(srv) <= 64:
        nx.draw_networkx_labels(graph, pos, font_size=7, ax=ax)
    ax.set_title(f"{graph.graph.get('name', '')}: {len(srv)} servers, {len(sw)} switches, "
                 f"{graph.number_of_edges()} links")
    ax.legend(loc="upper right", scatterpoints=1, fontsize=8)
    ax.axis("off")
    fig.tight_layout()
    try:
        fig.savefig(path, dpi=110)
    except OSError as exc:
        raise ValueError(f"cannot write {path!r}: {exc.strerror}") from None
    finally:
        plt.close(fig)
