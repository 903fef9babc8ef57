"""Link load from the switches' port counters (pure: a fake /proc/net/dev)."""

from __future__ import annotations

import pytest

import topology as tp
from controller.topofile import layout
from emulation.linkstats import PortCounters, read_counters
from emulation.plan import counted_ports, plan_links

HEAD = "Inter-|   Receive |  Transmit\n face |bytes packets|bytes packets\n"


def dev(counters: dict[str, tuple[int, int]]) -> str:
    return HEAD + "".join(f"{name}: {rx} 1 0 0 0 0 0 0 {tx} 1 0 0 0 0 0 0\n"
                          for name, (rx, tx) in counters.items())


def test_read_counters_takes_received_and_transmitted_bytes():
    assert read_counters(dev({"vs00-eth2": (5, 7), "lo": (1, 1)})) == {
        "vs00-eth2": (5, 7), "lo": (1, 1)}


@pytest.mark.parametrize("family,params", [
    ("bcube", {"n": 2, "k": 1}), ("dcell", {"n": 3, "k": 1}),
    ("jellyfish", {"switches": 8, "ports": 5, "uplinks": 3, "seed": 1})])
def test_every_graph_link_is_counted_at_a_switch_port(family, params):
    topo = layout(tp.make_graph(family, **params))
    ports = counted_ports(topo)
    assert {frozenset((a, b)) for a, b, _ in ports} == {
        frozenset(e) for e in topo.graph.edges()}
    bridges = {dp.bridge for dp in topo.datapaths.values()}
    intfs = {link["intf_a"]: link["a"] for link in plan_links(topo)}
    for a, _, intf in ports:
        assert a in topo.datapaths and intfs[intf] in bridges


def test_load_turns_samples_into_mbps_on_the_run_clock(tmp_path):
    proc = tmp_path / "dev"
    counters = PortCounters([("s00", "w0_0", "p1")], source=proc)
    # samples at t0 - 0.1, t0, t0 + 0.1, t0 + 0.2, t0 + 0.3 (monotonic seconds), written by hand
    t0 = 100.0
    counts = [(0, 0), (0, 0), (1000, 125_000), (1000, 250_000), (2000, 250_000)]
    counters.samples = [(t0 - 0.1 + 0.1 * i, {"p1": c}) for i, c in enumerate(counts)]
    load = counters.load(t0, end_s=0.2)
    assert load.source == "emulation"
    assert load.edges_s == pytest.approx((0.0, 0.1, 0.2))
    assert load.mbps[("s00", "w0_0")] == pytest.approx((10.0, 10.0))  # 125 kB per 0.1 s
    assert load.mbps[("w0_0", "s00")] == pytest.approx((0.08, 0.0))
    merged = counters.load(t0, end_s=0.3, max_bins=2)
    assert merged.edges_s == pytest.approx((0.0, 0.2, 0.3))
    assert merged.mbps[("s00", "w0_0")] == pytest.approx((10.0, 0.0))
    with pytest.raises(ValueError, match="fewer than two"):
        PortCounters([], source=proc).load(t0, 1.0)


def test_sampling_thread_reads_the_file_until_stopped(tmp_path):
    proc = tmp_path / "dev"
    proc.write_text(dev({"p1": (0, 0)}))
    counters = PortCounters([("a", "b", "p1")], interval_s=0.01, source=proc).start()
    proc.write_text(dev({"p1": (10, 20)}))
    counters.stop()
    assert len(counters.samples) >= 2
    assert counters.samples[-1][1]["p1"] == (10, 20)
    assert all(b[0] >= a[0] for a, b in zip(counters.samples, counters.samples[1:]))
