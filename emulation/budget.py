"""The datapath's load budget and the workers' transfer budget, and the link rate they
allow (``--bw-mbps auto``).

The emulated data plane forwards every byte once per datapath it crosses; shaping is exact
only while that total stays well below what the datapath can forward. ``measure_forwarding``
measures the raw rate (one TCP flow through a chain of datapaths on unshaped links), the
budget is BUDGET_SHARE of it, and ``cached_budget`` keeps it per machine and software
version. The hosts' workers have a second budget, in transfers per second: every transfer
costs them CPU whatever its size, so a schedule of thousands of tiny transfers is bounded
by the cores, not by the links (TRANSFER_SHARE). ``choose_rate`` is the highest link rate
at which every schedule's offered load stays within a budget (both loads grow in proportion
to the link rate). Only the probe needs Mininet (through ``emulation.net``).
"""

from __future__ import annotations

import json
import math
import os
import platform
import subprocess
from collections.abc import Callable
from pathlib import Path

import networkx as nx

from simulator.page import CACHE

#: Share of the raw forwarding rate (one bulk flow, alone) up to which a run's offered load
#: keeps the shaping exact. Fitted once, on the development machine: the probe measured
#: about 5 100 Mbit/s there, and multitree's error on BCube(4,1) stopped falling below about
#: 400 Mbit/s of offered load (docs/emulation.md, "Limits"). Workers, ACKs and many small
#: flows share the cores with the datapath, hence the small share; the probe scales the
#: budget with the machine, the share is not measured per machine.
BUDGET_SHARE = 0.08
#: Transfers per second the hosts' workers complete faithfully, per Mbit/s of the probe's
#: raw forwarding rate (which stands in for the machine's speed). Fitted once, on the
#: development machine (raw rate about 5 600 Mbit/s, so about 2 000 transfers/s):
#: DCell(3,1) multitree at 0.25 MB (3 696 transfers of 1.5 kB) offered about 12 400, 3 000
#: and 1 500 transfers/s at 8, 2 and 1 Mbit/s and came out +154, +13.5 and +6.8 % against
#: the calibrated model (docs/emulation.md, "Limits"); at 8 Mbit/s the workers completed
#: about 3 400 transfers/s. Fitted with one Open vSwitch instance on the userspace datapath
#: only: with more instances or the kernel datapath the probe's rate grows while the hosts'
#: cores do not, so this budget is then generous (not measured).
TRANSFER_SHARE = 0.36
#: Datapaths the probe's flow crosses.
CHAIN = 4
#: Link rate of the probe's links, Mbit/s: far above what the datapath forwards.
PROBE_MBPS = 20_000.0
#: Bounds of an automatic link rate, Mbit/s.
MIN_RATE, MAX_RATE = 0.1, 1000.0


def probe_graph(length: int = CHAIN) -> nx.Graph:
    """Two servers joined by a chain of ``length`` switches (servers do not relay)."""
    graph = nx.Graph(name="budget-probe", bw_mbps=PROBE_MBPS, servers_relay=False,
                     spec={"family": "budget-probe", "params": {"chain": length}})
    graph.add_node("p0", role="server", rank=0)
    graph.add_node("p1", role="server", rank=1)
    chain = [f"pw{i}" for i in range(length)]
    for name in chain:
        graph.add_node(name, role="switch")
    for a, b in zip(["p0", *chain], [*chain, "p1"]):
        graph.add_edge(a, b, bw_mbps=PROBE_MBPS)
    return graph


def chain_length(instances: int = 1) -> int:
    """Datapaths the probe's flow crosses: CHAIN, or one per Open vSwitch instance when there
    are more (consecutive datapaths of the chain belong to different instances)."""
    return max(CHAIN, instances)


def measure_forwarding(workdir: Path, datapath: str = "user", seconds: float = 3.0,
                       instances: int = 1) -> float:
    """Mbit/s of datapath crossings one TCP flow gets through a chain of datapaths spread
    over ``instances`` Open vSwitch instances."""
    from emulation.net import EmulatedNetwork

    length = chain_length(instances)
    with EmulatedNetwork(probe_graph(length), workdir=workdir, datapath=datapath,
                         ovs_instances=instances) as net:
        mbps = net.measure_goodput("p0", "p1", seconds=seconds)
    return mbps * length


def machine_key(datapath: str, instances: int = 1) -> str:
    """What the budget depends on: CPU, cores, kernel, Open vSwitch version, datapath, and
    the number of Open vSwitch instances (named when more than one)."""
    try:
        ovs = subprocess.run(["ovs-vswitchd", "--version"], capture_output=True, text=True,
                             timeout=5).stdout.split("\n")[0].split()[-1]
    except (OSError, subprocess.SubprocessError, IndexError):
        ovs = "?"
    cpu = "?"
    try:
        for line in Path("/proc/cpuinfo").read_text().splitlines():
            if line.startswith("model name"):
                cpu = line.split(":", 1)[1].strip()
                break
    except OSError:
        pass
    key = f"{cpu} x{os.cpu_count()} | {platform.release()} | ovs {ovs} | {datapath}"
    return key + (f" | {instances} instances" if instances > 1 else "")


def cached_budget(datapath: str, measure: Callable[[], float],
                  cache: Path = CACHE, instances: int = 1) -> dict:
    """``{"budget_mbps", "budget_transfers_per_s", "raw_mbps", "key", "cached"}``: the
    budgets of this machine with ``instances`` Open vSwitch instances, from the cache file
    or measured (``measure()`` returns the raw forwarding rate) and stored."""
    key = machine_key(datapath, instances)
    path = cache / "budget.json"
    try:
        known = json.loads(path.read_text())
    except (OSError, json.JSONDecodeError):
        known = {}
    entry = known.get(key) if isinstance(known, dict) else None
    raw = entry.get("raw_mbps") if isinstance(entry, dict) else None
    if isinstance(raw, (int, float)) and raw > 0:
        return {"raw_mbps": raw, "budget_mbps": BUDGET_SHARE * raw,
                "budget_transfers_per_s": TRANSFER_SHARE * raw, "key": key, "cached": True}
    raw = measure()
    entry = {"raw_mbps": raw, "budget_mbps": BUDGET_SHARE * raw}
    try:
        cache.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps({**(known if isinstance(known, dict) else {}),
                                    key: entry}, indent=1) + "\n")
    except OSError:
        pass
    return entry | {"budget_transfers_per_s": TRANSFER_SHARE * raw, "key": key,
                    "cached": False}


def choose_rate(load_per_mbps: dict[str, float], budget: float) -> float:
    """The highest link rate (Mbit/s, two significant digits, rounded down, within
    MIN_RATE..MAX_RATE) at which every schedule's offered load stays within ``budget``,
    given each schedule's offered load per Mbit/s of link rate (load scales with the rate):
    datapath Mbit/s against the forwarding budget, or transfers/s against the workers'.

    >>> choose_rate({"ring": 10.0, "multitree": 63.5}, 400.0)
    6.2
    """
    if not budget > 0:
        raise ValueError(f"budget must be > 0, got {budget!r}")
    worst = max(load_per_mbps.values(), default=0.0)
    if worst <= 0:
        return MAX_RATE
    rate = budget / worst
    digits = 1 - math.floor(math.log10(rate))
    rate = math.floor(rate * 10.0**digits + 1e-9) / 10.0**digits
    return min(MAX_RATE, max(MIN_RATE, round(rate, max(digits, 0))))
