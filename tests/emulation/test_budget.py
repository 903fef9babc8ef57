"""The datapath budget and the automatic link rate (pure): the rate choice, the cache per
machine, scaling a network's rates."""

from __future__ import annotations

import json

import pytest

import topology as tp
from emulation.budget import (
    BUDGET_SHARE,
    MAX_RATE,
    MIN_RATE,
    TRANSFER_SHARE,
    cached_budget,
    choose_rate,
)
from emulation.run import offered_load_mbps
from topology.links import link_rate_mbps, scaled, with_background_flow


def test_the_rate_fits_the_worst_load_rounded_down():
    # 400 / 63.5 = 6.299...: two significant digits, rounded down.
    assert choose_rate({"ring": 10.0, "multitree": 63.5}, 400.0) == 6.2
    assert choose_rate({"ring": 10.0}, 400.0) == 40.0
    assert choose_rate({"a": 1e-6}, 400.0) == MAX_RATE
    assert choose_rate({"a": 1e9}, 400.0) == MIN_RATE
    assert choose_rate({}, 400.0) == MAX_RATE
    with pytest.raises(ValueError, match="budget must be > 0"):
        choose_rate({"a": 1.0}, 0.0)


def test_the_budget_is_measured_once_per_machine_and_datapath(tmp_path):
    calls = []

    def measure() -> float:
        calls.append(1)
        return 5000.0

    first = cached_budget("user", measure, cache=tmp_path)
    assert first["cached"] is False and first["budget_mbps"] == BUDGET_SHARE * 5000.0
    assert first["budget_transfers_per_s"] == TRANSFER_SHARE * 5000.0
    again = cached_budget("user", measure, cache=tmp_path)
    assert again["cached"] is True and again["budget_mbps"] == first["budget_mbps"]
    assert again["budget_transfers_per_s"] == first["budget_transfers_per_s"]
    assert len(calls) == 1
    other = cached_budget("kernel", lambda: 20000.0, cache=tmp_path)
    assert other["cached"] is False and other["raw_mbps"] == 20000.0
    stored = json.loads((tmp_path / "budget.json").read_text())
    assert len(stored) == 2 and first["key"] in stored and "| user" in first["key"]


def test_a_corrupt_cache_is_measured_again(tmp_path):
    (tmp_path / "budget.json").write_text("{not json")
    assert cached_budget("user", lambda: 100.0, cache=tmp_path)["raw_mbps"] == 100.0
    key = cached_budget("user", lambda: 100.0, cache=tmp_path)["key"]
    (tmp_path / "budget.json").write_text(json.dumps({key: {"budget_mbps": 8.0}}))
    again = cached_budget("user", lambda: 200.0, cache=tmp_path)
    assert again["cached"] is False and again["budget_transfers_per_s"] == TRANSFER_SHARE * 200


def test_scaling_keeps_the_network_and_its_background():
    g = with_background_flow(tp.make_graph("bcube", n=2, k=1), "s00", "s10", 4.0)
    half = scaled(g, 0.5)
    assert half.graph["bw_mbps"] == 5.0
    assert half.graph["background_flows"][0]["mbps"] == 2.0
    assert link_rate_mbps(half, "s00", "w1_0") == pytest.approx(3.0)
    assert g.graph["bw_mbps"] == 10.0  # the original is untouched
    with pytest.raises(ValueError, match="scale factor"):
        scaled(g, 0)


def test_auto_rate_obeys_the_tighter_budget():
    """``settle_rate`` lowers the rate for the datapath's budget or the workers', whichever
    allows less, and says which."""
    import argparse

    from emulation.run import plan_all, settle_rate

    graph = tp.make_graph("dcell", n=3, k=1)
    args = argparse.Namespace(bw_mbps="auto", size_mb=0.25, dtype="float32",
                              scheduler="ring,multitree", schedule=[])
    size, plans = plan_all(args, graph)
    roomy = {"budget_mbps": 1e6, "budget_transfers_per_s": 1e9}
    assert settle_rate(args, graph, size, plans, roomy)[3]["bw_mbps"] == 10.0
    # multitree: 3 696 transfers in 0.21 s at 10 Mbit/s, about 1 770 per s per Mbit/s
    tight = {"budget_mbps": 1e6, "budget_transfers_per_s": 2000.0}
    slower, _, replanned, rate = settle_rate(args, graph, size, plans, tight)
    assert rate["bw_mbps"] == 1.1 and slower.graph["bw_mbps"] == 1.1
    assert "multitree would have the workers complete" in rate["why"]
    assert [p["scheduler"] for p in replanned] == ["ring", "multitree"]
    asked = argparse.Namespace(**(vars(args) | {"bw_mbps": 10.0}))
    assert settle_rate(asked, graph, size, plans, tight)[3]["why"] == "asked on the command line"
    roomy_why = settle_rate(args, graph, size, plans, roomy)[3]["why"]
    assert "datapaths: multitree" in roomy_why and "workers: multitree" in roomy_why
    # the datapath's budget the tighter one; a budget without the workers' part (an older
    # caller) obeys the datapath's alone
    loads = {p["scheduler"]: offered_load_mbps(p["schedule"], graph, p["raw"].makespan_s)
             for p in plans}
    for cap in ({"budget_mbps": max(loads.values()) / 4, "budget_transfers_per_s": 1e9},
                {"budget_mbps": max(loads.values()) / 4}):
        rate = settle_rate(args, graph, size, plans, cap)[3]
        assert rate["bw_mbps"] == pytest.approx(2.5)
        assert "would make the datapaths forward" in rate["why"]
    with pytest.raises(ValueError, match="budget must be > 0"):
        settle_rate(args, graph, size, plans, {"budget_mbps": 0.0})


def test_auto_rate_settles_again_after_re_planning(monkeypatch):
    """A scheduler that plans for the rate and asks for more at the lower one: the rate is
    lowered again, and the reason keeps both steps."""
    import argparse

    import emulation.run as run

    graph = tp.make_graph("bcube", n=2, k=1)
    args = argparse.Namespace(bw_mbps="auto", size_mb=1.0, dtype="float32", scheduler="ring",
                              schedule=[])
    size, plans = run.plan_all(args, graph)
    per_mbps = run.offered_transfers_per_s(plans[0]["schedule"], plans[0]["raw"].makespan_s)
    per_mbps /= 10.0
    real = run.plan_all

    def plan_all(args, slower):  # twice the transfers/s below 10 Mbit/s
        size, again = real(args, slower)
        if slower.graph["bw_mbps"] < 10:
            raw = again[0]["raw"]
            again[0]["raw"] = type(raw)(**{**vars(raw), "makespan_s": raw.makespan_s / 2})
        return size, again

    monkeypatch.setattr(run, "plan_all", plan_all)
    rate = run.settle_rate(args, graph, size, plans,
                           {"budget_mbps": 1e6, "budget_transfers_per_s": 1.7 * per_mbps})
    assert rate[3]["bw_mbps"] == pytest.approx(0.85, rel=0.02)
    assert rate[3]["why"].count("would have the workers complete") == 2
    assert "re-planned there" in rate[3]["why"]
