"""Command-line plumbing shared by every entry point: one-line errors with exit status 2, the
topology flags (``--topo --topo-file --n --k --switches --ports --uplinks --seed --bw-mbps``)
and the network conditions (``--link-rate --fail-link --background --fail-link-at``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import networkx as nx

from topology import DEFAULT_BW_MBPS, DEFAULTS, FAMILIES, make_graph
from topology.files import read_topology
from topology.links import (
    with_background_flow,
    with_link_failure,
    with_link_rates,
    without_link,
)

USAGE_ERROR = 2


class ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(USAGE_ERROR)


def _rate_or_auto(text: str) -> float | str:
    if text == "auto":
        return text
    try:
        return float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"not a number or 'auto': {text!r}") from None


def add_topology_args(parser: argparse.ArgumentParser, positional: bool = False,
                      defaults: dict[str, dict[str, int]] | None = None,
                      auto_rate: bool = False) -> None:
    """Add the family (``--topo`` or a positional) and its parameters to ``parser``;
    ``defaults`` (per family) only changes what the help says the defaults are. With
    ``auto_rate``, ``--bw-mbps`` also takes (and defaults to) ``auto``, which the command
    resolves; the graph is built at DEFAULT_BW_MBPS until then."""
    defaults = defaults or DEFAULTS
    if positional:
        parser.add_argument("topo", choices=FAMILIES, metavar="{" + ",".join(FAMILIES) + "}",
                            nargs="?", help="topology family (or give --topo-file)")
    else:
        parser.add_argument("--topo", choices=FAMILIES, default=None,
                            help="topology family (default: bcube)")
    parser.add_argument("--topo-file", metavar="F",
                        help="read the topology from a GraphML or node-link JSON file instead "
                             "(docs/design.md, 'Topology files')")
    shown = "; ".join(f"{family} " + ", ".join(f"{k}={v}" for k, v in params.items())
                      for family, params in defaults.items())
    group = parser.add_argument_group(f"topology parameters (defaults: {shown})")
    group.add_argument("--n", type=int, help="BCube/DCell: ports per switch (>= 2)")
    group.add_argument("--k", type=int, help="BCube/DCell: recursion level (>= 0)")
    group.add_argument("--switches", type=int, help="Jellyfish: number of switches")
    group.add_argument("--ports", type=int, help="Jellyfish: ports per switch")
    group.add_argument("--uplinks", type=int, help="Jellyfish: switch-to-switch ports (>= 3)")
    group.add_argument("--seed", type=int, help="Jellyfish: random seed (default 0)")
    if auto_rate:
        group.add_argument("--bw-mbps", type=_rate_or_auto, default="auto",
                           help="capacity of every link, each direction (with --topo-file: "
                                "of links the file gives no rate), or auto (the default): "
                                f"{DEFAULT_BW_MBPS:g}, lowered until every scheduler's load "
                                "fits the datapath's measured budget and its transfers per "
                                "second fit the hosts' workers'")
    else:
        group.add_argument("--bw-mbps", type=float, default=DEFAULT_BW_MBPS,
                           help="capacity of every link, each direction; with --topo-file, "
                                f"of links the file gives no rate (default {DEFAULT_BW_MBPS:g})")
    cond = parser.add_argument_group("network conditions (repeatable; A, B are node names)")
    cond.add_argument("--link-rate", action="append", default=[], metavar="A-B=MBPS",
                      help="run link A-B at MBPS Mbit/s each direction")
    cond.add_argument("--fail-link", action="append", default=[], metavar="A-B",
                      help="remove link A-B before the run")
    cond.add_argument("--background", action="append", default=[], metavar="A:B=MBPS",
                      help="a steady flow of MBPS Mbit/s from server A to server B on its "
                           "routing path, sharing links with the AllReduce")
    cond.add_argument("--fail-link-at", action="append", default=[], metavar="A-B@SECONDS",
                      help="link A-B goes down SECONDS into each scheduler's run; traffic "
                           "continues on backup paths")


PARAMS = ("n", "k", "switches", "ports", "uplinks", "seed")


def topology_params(args: argparse.Namespace) -> dict[str, int]:
    """The family parameters given on the command line; flags of another family are errors."""
    params = {}
    for name in PARAMS:
        value = getattr(args, name)
        if value is None:
            continue
        if getattr(args, "topo_file", None):
            raise ValueError(f"--{name} does not apply to --topo-file")
        if name not in DEFAULTS[args.topo or "bcube"]:
            raise ValueError(f"--{name} does not apply to {args.topo or 'bcube'}")
        params[name] = value
    return params


def split_link(graph: nx.Graph, text: str, flag: str, sep: str = "-") -> tuple[str, str]:
    """Nodes A, B of ``A<sep>B`` (names may contain ``sep``: the split that names two
    nodes wins); ValueError naming the flag and value otherwise."""
    parts = text.split(sep)
    for i in range(1, len(parts)):
        a, b = sep.join(parts[:i]).strip(), sep.join(parts[i:]).strip()
        if a in graph and b in graph:
            return a, b
    raise ValueError(f"{flag} {text!r}: not two nodes of {graph.graph.get('name', 'the graph')} "
                     f"joined by {sep!r}")


def _value(text: str, flag: str, sep: str) -> tuple[str, float]:
    head, found, tail = text.rpartition(sep)
    try:
        if not found:
            raise ValueError
        return head, float(tail)
    except ValueError:
        raise ValueError(f"{flag} {text!r}: expected ...{sep}NUMBER") from None


def with_conditions(graph: nx.Graph, args: argparse.Namespace) -> nx.Graph:
    """``graph`` with the network conditions of the command line applied, in the order
    link rates, failed links, background flows, failures during the run."""
    rates = {}
    for text in getattr(args, "link_rate", None) or []:
        head, mbps = _value(text, "--link-rate", "=")
        rates[split_link(graph, head, "--link-rate")] = mbps
    if rates:
        graph = with_link_rates(graph, rates)
    for text in getattr(args, "fail_link", None) or []:
        graph = without_link(graph, *split_link(graph, text, "--fail-link"))
    for text in getattr(args, "background", None) or []:
        head, mbps = _value(text, "--background", "=")
        graph = with_background_flow(graph, *split_link(graph, head, "--background", ":"),
                                     mbps)
    for text in getattr(args, "fail_link_at", None) or []:
        head, at_s = _value(text, "--fail-link-at", "@")
        graph = with_link_failure(graph, *split_link(graph, head, "--fail-link-at"), at_s)
    return graph


def _rate(args: argparse.Namespace) -> float:
    return DEFAULT_BW_MBPS if args.bw_mbps == "auto" else args.bw_mbps


def graph_from_args(args: argparse.Namespace,
                    defaults: dict[str, dict[str, int]] | None = None) -> nx.Graph:
    """Build the topology the parsed arguments describe, network conditions applied
    (ValueError on bad values); parameters not given take ``defaults`` (per family), else
    topology.DEFAULTS. Sets ``args.topo`` to the family (``file`` for a topology file)."""
    params = topology_params(args)
    if getattr(args, "topo_file", None):
        if args.topo is not None:
            raise ValueError("give either a topology family or --topo-file, not both")
        graph = read_topology(args.topo_file, bw_mbps=_rate(args))
        args.topo = graph.graph["spec"]["family"]
    else:
        args.topo = args.topo or "bcube"
        params = {**(defaults or DEFAULTS)[args.topo], **params}
        graph = make_graph(args.topo, bw_mbps=_rate(args), **params)
    return with_conditions(graph, args)


def run(main: Callable[[], int | None], prog: str) -> None:
    """Run a CLI ``main``: bad values (ValueError) become one line and exit status 2, Ctrl-C
    exits 130 without a traceback."""
    try:
        code = main()
    except ValueError as exc:
        sys.stderr.write(f"{prog}: error: {exc}\n")
        raise SystemExit(USAGE_ERROR) from None
    except KeyboardInterrupt:
        sys.stderr.write(f"{prog}: interrupted\n")
        raise SystemExit(130) from None
    raise SystemExit(code or 0)
