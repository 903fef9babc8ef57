"""``python -m controller --topology FILE --of-port 6653 --api 127.0.0.1:8080 [--log FILE]``.

Runs the Ryu app in this process; exits 0 on SIGTERM or SIGINT, 2 on bad arguments."""

from __future__ import annotations

import argparse
import ipaddress
import sys
from pathlib import Path


def parse_api(text: str) -> tuple[str, int]:
    """Parse HOST:PORT; the host must be a loopback address (the API has no authentication)."""
    host, sep, port = text.rpartition(":")
    try:
        if not sep or not ipaddress.ip_address(host).is_loopback or not 0 < int(port) < 65536:
            raise ValueError
    except ValueError:
        raise argparse.ArgumentTypeError(
            f"--api must be a loopback HOST:PORT such as 127.0.0.1:8080, got {text!r}") from None
    return host, int(port)


def main(argv: list[str] | None = None) -> int:
    """Parse arguments, check the topology file, run the controller."""
    parser = argparse.ArgumentParser(prog="python -m controller", description=__doc__)
    parser.add_argument("--topology", type=Path, required=True,
                        help="topology file written by the emulation (JSON)")
    parser.add_argument("--of-port", type=int, default=6653,
                        help="OpenFlow port to listen on, on 127.0.0.1 (default 6653)")
    parser.add_argument("--api", type=parse_api, default=("127.0.0.1", 8080),
                        help="HTTP API address, loopback only (default 127.0.0.1:8080)")
    parser.add_argument("--log", type=Path, default=None, help="log file (default stderr)")
    args = parser.parse_args(argv)
    try:
        import eventlet
    except ImportError as exc:
        print(f"python -m controller: Ryu is missing ({exc}): run scripts/setup.sh",
              file=sys.stderr)
        return 2
    # Ryu's hub.patch() is eventlet.monkey_patch(); patching before the heavy imports saves
    # seconds (eventlet re-greens every lock that already exists, one gc pass each).
    eventlet.monkey_patch()
    from controller.topofile import Topology

    try:
        Topology.load(args.topology)
    except (OSError, ValueError) as exc:
        print(f"python -m controller: cannot read {args.topology}: {exc}", file=sys.stderr)
        return 2
    try:
        from controller import app
    except ImportError as exc:
        print(f"python -m controller: Ryu is missing ({exc}): run scripts/setup.sh",
              file=sys.stderr)
        return 2
    return app.run(str(args.topology), args.of_port, args.api[0], args.api[1],
                   str(args.log) if args.log else None)


if __name__ == "__main__":
    sys.exit(main())
