"""Command-line plumbing shared by every entry point: one-line errors with exit status 2, and
the topology flags (``--n --k --switches --ports --uplinks --seed --bw-mbps``)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Callable

import networkx as nx

from topology import DEFAULT_BW_MBPS, DEFAULTS, FAMILIES, make_graph

USAGE_ERROR = 2


class ArgumentParser(argparse.ArgumentParser):
    """An ArgumentParser whose errors are one line on stderr and exit status 2."""

    def error(self, message: str) -> None:  # type: ignore[override]
        sys.stderr.write(f"{self.prog}: error: {message}\n")
        raise SystemExit(USAGE_ERROR)


def add_topology_args(parser: argparse.ArgumentParser, positional: bool = False,
                      defaults: dict[str, dict[str, int]] | None = None) -> None:
    """Add the family (``--topo`` or a positional) and its parameters to ``parser``;
    ``defaults`` (per family) only changes what the help says the defaults are."""
    defaults = defaults or DEFAULTS
    if positional:
        parser.add_argument("topo", choices=FAMILIES, metavar="{" + ",".join(FAMILIES) + "}",
                            help="topology family")
    else:
        parser.add_argument("--topo", choices=FAMILIES, default="bcube",
                            help="topology family (default: bcube)")
    shown = "; ".join(f"{family} " + ", ".join(f"{k}={v}" for k, v in params.items())
                      for family, params in defaults.items())
    group = parser.add_argument_group(f"topology parameters (defaults: {shown})")
    group.add_argument("--n", type=int, help="BCube/DCell: ports per switch (>= 2)")
    group.add_argument("--k", type=int, help="BCube/DCell: recursion level (>= 0)")
    group.add_argument("--switches", type=int, help="Jellyfish: number of switches")
    group.add_argument("--ports", type=int, help="Jellyfish: ports per switch")
    group.add_argument("--uplinks", type=int, help="Jellyfish: switch-to-switch ports (>= 3)")
    group.add_argument("--seed", type=int, help="Jellyfish: random seed (default 0)")
    group.add_argument("--bw-mbps", type=float, default=DEFAULT_BW_MBPS,
                       help=f"capacity of every link, each direction (default {DEFAULT_BW_MBPS:g})")


def topology_params(args: argparse.Namespace) -> dict[str, int]:
    """The family parameters given on the command line; flags of another family are errors."""
    params = {}
    for name in ("n", "k", "switches", "ports", "uplinks", "seed"):
        value = getattr(args, name)
        if value is None:
            continue
        if name not in DEFAULTS[args.topo]:
            raise ValueError(f"--{name} does not apply to {args.topo}")
        params[name] = value
    return params


def graph_from_args(args: argparse.Namespace,
                    defaults: dict[str, dict[str, int]] | None = None) -> nx.Graph:
    """Build the topology the parsed arguments describe (ValueError on bad values);
    parameters not given take ``defaults`` (per family), else topology.DEFAULTS."""
    params = {**(defaults or DEFAULTS)[args.topo], **topology_params(args)}
    return make_graph(args.topo, bw_mbps=args.bw_mbps, **params)


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
