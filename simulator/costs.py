"""The cost model the simulator runs under: link goodput, a fixed cost per transfer, a
latency per link crossed, the pause of a flow a failing link cut and the frame size of the
queue drain, with defaults measured by the emulation here and a way to reuse what any
``emulation.run`` measured.

Pure: standard library only.
"""

from __future__ import annotations

import json
from dataclasses import asdict, dataclass
from pathlib import Path


@dataclass(frozen=True)
class CostModel:
    """Keyword arguments of ``simulator.simulate`` beyond the graph and the schedule."""

    #: Fixed cost of every transfer (connect, frame, acknowledge), seconds.
    startup_s: float = 0.0
    #: Latency of every link a transfer crosses, seconds.
    hop_latency_s: float = 0.0
    #: Fraction of a link's rate one TCP flow moves.
    goodput: float = 1.0
    #: Pause of a flow that was sending across a link when it failed, before it continues on
    #: the backup path (the transport's retransmission timeout), seconds.
    failover_s: float = 0.0
    #: Bytes of a full frame on the links, for the drain of full round-robin queues
    #: (``simulator.frames``); 0: the fluid model alone.
    frame_bytes: float = 0.0

    def __post_init__(self) -> None:
        for name in ("startup_s", "hop_latency_s", "failover_s", "frame_bytes"):
            if not getattr(self, name) >= 0:
                raise ValueError(f"{name} must be >= 0, got {getattr(self, name)!r}")
        if not 0 < self.goodput <= 1:
            raise ValueError(f"goodput must be in (0, 1], got {self.goodput!r}")

    def kwargs(self) -> dict:
        """``simulate(graph, schedule, **cost.kwargs())``."""
        return asdict(self)

    @classmethod
    def from_results(cls, path: str | Path) -> CostModel:
        """The calibration an ``emulation.run`` recorded in its results.json (a file or
        its directory); ValueError naming the file when it has none."""
        path = Path(path)
        if path.is_dir():
            path = path / "results.json"
        try:
            cal = json.loads(path.read_text()).get("calibration")
        except (OSError, json.JSONDecodeError, AttributeError) as exc:
            raise ValueError(f"cannot read a calibration from {path}: {exc}") from None
        if not isinstance(cal, dict) or "goodput_ratio" not in cal or "startup_s" not in cal:
            raise ValueError(f"{path} records no calibration (run without --no-calibrate)")
        return cls(startup_s=float(cal["startup_s"]),
                   hop_latency_s=float(cal.get("hop_latency_s", 0.0)),
                   goodput=min(1.0, float(cal["goodput_ratio"])),
                   failover_s=float(cal.get("failover_s", 0.0)),
                   frame_bytes=float(cal.get("frame_bytes", 0.0)))


#: The pure bandwidth model.
BANDWIDTH_ONLY = CostModel()
#: What ``sudo make demo`` measured on this machine (BCube(4,1), 10 Mbit/s, OVS userspace
#: datapath): one flow moves 0.985 of the shaped rate, a transfer's fixed cost is 2.0 ms.
#: The calibration does not separate a per-link latency from the fixed cost (it measures
#: one-link transfers), so the latency is 0 here. A flow cut by a failing link waits for
#: the emulated hosts' minimum retransmission timeout (``emulation.net.RTO_MIN_MS``).
CALIBRATED = CostModel(startup_s=2.0e-3, hop_latency_s=0.0, goodput=0.985,
                       failover_s=1.0)
