"""Link load in the emulation, from the port statistics of its switches.

Every graph link with an end on a datapath has that end's port in the root network namespace,
or in the namespace of the Open vSwitch instance holding the datapath (``emulation.ovs``)
(``emulation.plan.counted_ports``); the kernel counts the bytes each port sends and receives
(the counters Open vSwitch reports as its port statistics). ``PortCounters`` reads them all at
once from ``/proc/net/dev`` (and ``/proc/PID/net/dev`` of a process in each other namespace)
on a thread, a sample every ``interval_s``, while a schedule runs;
``load`` turns the samples into the simulator's ``LinkLoad`` on the run's clock.
"""

from __future__ import annotations

import threading
import time
from pathlib import Path

from simulator.usage import LinkLoad

#: Seconds between two samples of the counters.
INTERVAL_S = 0.05
#: At most this many bins are kept: consecutive samples are merged above it.
MAX_BINS = 100

Sample = tuple[float, dict[str, tuple[int, int]]]


def read_counters(text: str) -> dict[str, tuple[int, int]]:
    """(received bytes, transmitted bytes) per interface in a ``/proc/net/dev`` text.

    >>> head = "Inter-| Receive\\n face |bytes\\n"
    >>> read_counters(head + "  s1-eth2: 10 1 0 0 0 0 0 0 20 2 0 0 0 0 0 0\\n")
    {'s1-eth2': (10, 20)}
    """
    out = {}
    for line in text.splitlines()[2:]:
        name, _, fields = line.partition(":")
        values = fields.split()
        if len(values) >= 9:
            out[name.strip()] = (int(values[0]), int(values[8]))
    return out


class PortCounters:
    """Samples the counters of ``ports`` ((a, b, interface) triples) on a thread from
    ``start()`` to ``stop()``; ``samples`` are (``time.monotonic()``, counters) pairs, the
    first taken at ``start()`` and the last at ``stop()``. ``source`` is the counters' file,
    ``more`` those of other namespaces (interface names are unique across them)."""

    def __init__(self, ports: list[tuple[str, str, str]], interval_s: float = INTERVAL_S,
                 source: Path = Path("/proc/net/dev"), more: tuple[Path, ...] = ()) -> None:
        self.ports = list(ports)
        self.interval_s = interval_s
        self.sources = (source, *more)
        self.samples: list[Sample] = []
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _sample(self) -> None:
        now, counters = time.monotonic(), {}
        for source in self.sources:
            counters.update(read_counters(source.read_text()))
        self.samples.append((now, counters))

    def _loop(self) -> None:
        while not self._stop.wait(self.interval_s):
            self._sample()

    def start(self) -> PortCounters:
        """Take the first sample and start sampling."""
        self._sample()
        self._thread = threading.Thread(target=self._loop, name="port-counters", daemon=True)
        self._thread.start()
        return self

    def stop(self) -> None:
        """Stop sampling and take the last sample."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join()
        self._sample()

    def load(self, t0: float, end_s: float, max_bins: int = MAX_BINS) -> LinkLoad:
        """Average Mbit/s of every directed link between consecutive samples (bytes at the
        port: headers and acknowledgements included), on the clock whose zero is ``t0``
        (monotonic), from the last sample at or before 0 to the first at or after
        ``end_s``; groups of consecutive samples are merged so that at most ``max_bins``
        bins remain. ValueError when fewer than two samples cover the run."""
        times = [t - t0 for t, _ in self.samples]
        first = max([i for i, t in enumerate(times) if t <= 0.0], default=0)
        last = min([i for i, t in enumerate(times) if t >= end_s], default=len(times) - 1)
        keep = list(range(first, last + 1))
        if len(keep) < 2:
            raise ValueError("the port counters were sampled fewer than two times in the run")
        step = -(-(len(keep) - 1) // max_bins)
        keep = keep[::step] if (len(keep) - 1) % step == 0 else [*keep[::step], keep[-1]]
        edges = tuple(times[i] for i in keep)
        mbps: dict[tuple[str, str], tuple[float, ...]] = {}
        for a, b, intf in self.ports:
            for d, index in (((a, b), 1), ((b, a), 0)):
                values = []
                for i, j in zip(keep, keep[1:]):
                    before = self.samples[i][1].get(intf)
                    after = self.samples[j][1].get(intf)
                    moved = 0 if before is None or after is None else \
                        after[index] - before[index]
                    values.append(8.0 * max(moved, 0) / (times[j] - times[i]) / 1e6)
                mbps[d] = tuple(values)
        return LinkLoad(edges, mbps, source="emulation")
