"""``python -m topology {bcube,dcell,jellyfish} [--n --k | --switches --ports --uplinks --seed]``
or ``python -m topology --topo-file F``

Prints the servers, switches, links and diameter of a topology (``--json`` for a JSON object),
optionally draws it (``--png FILE``) and writes it as GraphML or node-link JSON
(``--out F.graphml|F.json``), network conditions (``--link-rate``, ``--fail-link``) applied.
"""

from __future__ import annotations

import json

from topology import summary
from topology.cli import ArgumentParser, add_topology_args, graph_from_args, run

PROG = "python -m topology"


def main() -> int:
    """Entry point of ``python -m topology``."""
    parser = ArgumentParser(prog=PROG, description="Build a data-center topology and count it.")
    add_topology_args(parser, positional=True)
    parser.add_argument("--json", action="store_true", help="print one JSON object")
    parser.add_argument("--png", metavar="FILE", help="draw the topology into a PNG file")
    parser.add_argument("--out", metavar="F",
                        help="write the topology to F (.graphml or .json, by suffix)")
    args = parser.parse_args()
    if args.topo is None and not args.topo_file:
        parser.error("give a topology family (bcube, dcell, jellyfish) or --topo-file F")
    graph = graph_from_args(args)
    counts = summary(graph)
    if args.json:
        print(json.dumps(counts))
    else:
        print(f"{graph.graph['name']}: {counts['servers']} servers, {counts['switches']} switches,"
              f" {counts['links']} links, diameter {counts['diameter']} links,"
              f" {graph.graph['bw_mbps']:g} Mbit/s per link")
    if args.out:
        from topology.files import write_topology

        write_topology(graph, args.out)
        if not args.json:
            print(f"written to {args.out}")
    if args.png:
        from topology.draw import draw_png

        draw_png(graph, args.png)
        if not args.json:
            print(f"drawn to {args.png}")
    return 0


if __name__ == "__main__":
    run(main, PROG)
