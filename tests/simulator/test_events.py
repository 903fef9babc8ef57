"""Network events in the fluid simulator, against hand-computed times: background flows
(rate-capped flows sharing links max-min fairly) and link failures (re-routing onto
``topology.routing.backup_path``).

BCube(2, 1) is one 8-cycle: s00-w0_0-s01-w1_1-s11-w0_1-s10-w1_0-s00; without s00-w0_0,
s00 reaches s01 over s00-w1_0-s10-w0_1-s11-w1_1-s01.
"""

from __future__ import annotations

import networkx as nx
import pytest

import topology as tp
from simulator import Result, events, simulate
from topology.links import with_background, with_background_flow, with_link_failure
from traffic.collectives import build
from traffic.schedule import Schedule, Transfer

BW = 100.0  # Mbit/s
DIRECT = ("s00", "w0_0", "s01")
DETOUR = ("s00", "w1_0", "s10", "w0_1", "s11", "w1_1", "s01")


def bcube() -> nx.Graph:
    return tp.make_graph("bcube", n=2, k=1, bw_mbps=BW)


def send(tid: int, path: tuple[str, ...], bits: float, deps: tuple[int, ...] = ()) -> Transfer:
    """A transfer of ``bits`` (float32 elements) along ``path``."""
    return Transfer(tid, path[0], path[-1], 0, int(bits) // 32, "reduce", path, deps)


def plan(*transfers: Transfer) -> Schedule:
    elements = max(t.count for t in transfers)
    return Schedule({"family": "custom", "params": {}}, 4 * elements, "float32", transfers)


def ladder() -> nx.Graph:
    """Servers h0 and h1 joined by three parallel two-link routes over switches a, b, c at
    100, 50 and 25 Mbit/s (no spec: servers relay)."""
    g = nx.Graph()
    for rank, name in enumerate(("h0", "h1")):
        g.add_node(name, role="server", rank=rank)
    for switch, bw in (("a", BW), ("b", BW / 2), ("c", BW / 4)):
        g.add_node(switch, role="switch")
        g.add_edge("h0", switch, bw_mbps=bw)
        g.add_edge(switch, "h1", bw_mbps=bw)
    return g


# Background flows ---------------------------------------------------------------------------

def test_flow_capped_below_the_fair_share_leaves_the_transfer_the_rest():
    g = with_background_flow(bcube(), "s00", "s10", 30.0)
    assert g.graph["background_flows"][0]["path"] == ["s00", "w1_0", "s10"]
    r = simulate(g, plan(send(0, ("s00", "w1_0", "s10"), 7e6)))
    assert r.finish_s[0] == pytest.approx(7e6 / 70e6, rel=1e-12)
    assert r.makespan_s == r.finish_s[0] and r.rerouted == ()


def test_flow_capped_above_the_fair_share_splits_the_link_equally():
    # A scheduler sees 20 Mbit/s left; the flow only takes its max-min share of 50.
    g = with_background_flow(bcube(), "s00", "s10", 80.0)
    r = simulate(g, plan(send(0, ("s00", "w1_0", "s10"), 5e6)))
    assert r.makespan_s == pytest.approx(5e6 / 50e6, rel=1e-12)


def test_flow_runs_in_its_own_direction_and_on_its_own_links_only():
    g = with_background_flow(bcube(), "s00", "s10", 80.0)
    r = simulate(g, plan(send(0, ("s10", "w1_0", "s00"), 1e7), send(1, DIRECT, 1e7)))
    assert r.finish_s == pytest.approx({0: 0.1, 1: 0.1}, rel=1e-12)


def test_flow_share_is_re_solved_when_a_transfer_ends():
    # Cap 20 < a third of 100: the flow keeps 20, the transfers 40 each; once the short one
    # ends the long one gets 80 (half would be 50, above the cap).
    g = with_background_flow(bcube(), "s00", "s10", 20.0)
    hop = ("s00", "w1_0", "s10")
    r = simulate(g, plan(send(0, hop, 2e6), send(1, hop, 6e6)))
    assert r.finish_s[0] == pytest.approx(2e6 / 40e6, rel=1e-12)
    assert r.finish_s[1] == pytest.approx(0.05 + 4e6 / 80e6, rel=1e-12)


@pytest.mark.parametrize("goodput", [1.0, 0.5])
def test_flow_below_its_share_matches_the_closed_form_and_static_load(goodput):
    # A flow that never reaches its fair share is the same as static background load.
    g = bcube()
    schedule = plan(send(0, ("s00", "w1_0", "s10"), 7e6))
    expected = 7e6 / ((BW - 30.0) * 1e6 * goodput)
    flow = simulate(with_background_flow(g, "s00", "s10", 30.0), schedule, goodput=goodput)
    static = simulate(with_background(g, {("s00", "w1_0"): 30.0, ("w1_0", "s10"): 30.0}),
                      schedule, goodput=goodput)
    assert flow.makespan_s == pytest.approx(expected, rel=1e-12)
    assert static.makespan_s == pytest.approx(expected, rel=1e-12)


def test_unexplained_background_load_stays_subtracted():
    g = with_background_flow(with_background(bcube(), {("s00", "w1_0"): 10.0}),
                             "s00", "s10", 80.0)
    # s00->w1_0 carries 90 - 80 + 80 = 90 Mbit/s of which the flow may take half.
    r = simulate(g, plan(send(0, ("s00", "w1_0", "s10"), 4.5e6)))
    assert r.makespan_s == pytest.approx(4.5e6 / 45e6, rel=1e-12)


# Link failures ------------------------------------------------------------------------------

def test_failure_during_a_transfer_moves_the_rest_to_the_backup_path():
    # Both send alone at 100 until 0.04 s (4 Mbit each); then transfer 0's detour shares
    # s10->w0_1->s11 with transfer 1: 50 each until transfer 1's last 3 Mbit are out at
    # 0.10 s, then transfer 0 sends its last 3 Mbit at 100. Latency follows each final path.
    g = with_link_failure(bcube(), "s00", "w0_0", 0.04)
    other = ("s10", "w0_1", "s11")
    r = simulate(g, plan(send(0, DIRECT, 1e7), send(1, other, 7e6)), hop_latency_s=1e-3)
    assert r.finish_s[1] == pytest.approx(0.10 + 2e-3, rel=1e-12)
    assert r.finish_s[0] == pytest.approx(0.13 + 6e-3, rel=1e-12)
    assert r.rerouted == (0,)


def test_a_cut_transfer_pauses_failover_s_and_one_not_yet_started_does_not():
    # Transfer 0 sends alone at 100 until 0.04 s (4 Mbit), pauses 0.05 s, then sends its
    # last 6 Mbit on the detour at 100; transfer 1 starts at 0.06 s on the detour with no
    # pause, alone until transfer 0 resumes at 0.09 s, then both at 50.
    g = with_link_failure(bcube(), "s00", "w0_0", 0.04)
    second = send(1, DIRECT, 4e6, deps=(2,))
    gate = send(2, ("s10", "w1_0", "s00"), 6e6)
    r = simulate(g, plan(send(0, DIRECT, 1e7), second, gate), failover_s=0.05)
    # 1: 0.06..0.09 alone (3 Mbit), then 1 Mbit at 50 -> 0.11. 0: 0.09..0.11 at 50 (1 Mbit),
    # then 5 Mbit at 100 -> 0.16.
    assert r.finish_s[1] == pytest.approx(0.11, rel=1e-12)
    assert r.finish_s[0] == pytest.approx(0.16, rel=1e-12)
    assert r.rerouted == (0, 1)


def test_the_pause_of_the_only_transfer_left_is_waited_for():
    g = with_link_failure(bcube(), "s00", "w0_0", 0.04)
    r = simulate(g, plan(send(0, DIRECT, 1e7)), failover_s=0.5)
    assert r.finish_s[0] == pytest.approx(0.6, rel=1e-12)


def test_failure_before_the_start_uses_the_backup_path_from_the_start():
    g = with_link_failure(bcube(), "s00", "w0_0", 0.005)
    r = simulate(g, plan(send(0, DIRECT, 1e7)), startup_s=0.01, hop_latency_s=1e-3)
    assert r.start_s[0] == pytest.approx(0.01)
    assert r.finish_s[0] == pytest.approx(0.01 + 0.1 + 6e-3, rel=1e-12)
    assert r.rerouted == (0,)


def test_a_dependent_transfer_after_the_failure_starts_on_the_backup_path():
    g = with_link_failure(bcube(), "w0_0", "s01", 0.05)
    first = send(0, ("s10", "w1_0", "s00"), 1e7)
    r = simulate(g, plan(first, send(1, DIRECT, 1e7, deps=(0,))), startup_s=0.01)
    assert r.start_s[1] == pytest.approx(0.11 + 0.01)
    assert r.finish_s[1] == pytest.approx(0.22, rel=1e-12)
    assert r.rerouted == (1,)


@pytest.mark.parametrize("at_s", [0.1, 0.5])
def test_failure_after_the_makespan_changes_nothing(at_s):
    schedule = plan(send(0, DIRECT, 1e7), send(1, ("s10", "w0_1", "s11"), 7e6))
    plain = simulate(bcube(), schedule, hop_latency_s=1e-3)
    failed = simulate(with_link_failure(bcube(), "s00", "w0_0", at_s), schedule,
                      hop_latency_s=1e-3)
    assert failed.rerouted == ()
    assert failed.finish_s == pytest.approx(plain.finish_s, rel=1e-12)
    assert failed.makespan_s == pytest.approx(plain.makespan_s, rel=1e-12)


def test_failures_apply_in_time_order_and_re_route_a_backup_path():
    # 2 Mbit over a at 100 until 0.02 s, 1.5 Mbit over b at 50 until 0.05 s, the last
    # 6.5 Mbit over c at 25.
    g = with_link_failure(with_link_failure(ladder(), "h0", "b", 0.05), "h0", "a", 0.02)
    r = simulate(g, plan(send(0, ("h0", "a", "h1"), 1e7)), hop_latency_s=1e-3)
    assert r.finish_s[0] == pytest.approx(0.05 + 6.5e6 / 25e6 + 2e-3, rel=1e-12)
    assert r.rerouted == (0,)


def test_a_re_routed_background_flow_shares_its_backup_path():
    # The flow (cap 40 on b's 50) moves onto a at 0.02 s: the transfer drops from 100 to 60.
    g = ladder()
    g.graph["background_flows"] = [{"src": "h0", "dst": "h1", "mbps": 40.0,
                                    "path": ["h0", "b", "h1"]}]
    for edge in (("h0", "b"), ("b", "h1")):
        g.edges[edge]["background_mbps"] = 40.0
    g = with_link_failure(g, "h0", "b", 0.02)
    r = simulate(g, plan(send(0, ("h0", "a", "h1"), 1e7)))
    assert r.makespan_s == pytest.approx(0.02 + 8e6 / 60e6, rel=1e-12)
    assert r.rerouted == ()


def test_no_backup_path_names_the_transfer_and_the_link():
    g = with_link_failure(bcube(), "s00", "w0_0", 0.01)
    g.graph["servers_relay"] = False  # s00's only other way out runs through server s10
    with pytest.raises(ValueError, match="transfer 0: .*s00-w0_0"):
        simulate(g, plan(send(0, DIRECT, 1e7)))
    g.graph["background_flows"] = [{"src": "s00", "dst": "s01", "mbps": 1.0,
                                    "path": list(DIRECT)}]
    with pytest.raises(ValueError, match="background flow s00:s01: .*s00-w0_0"):
        simulate(g, plan(send(0, ("s10", "w0_1", "s11"), 1e7)))


# The engines and the Result -----------------------------------------------------------------

@pytest.mark.parametrize("algo", ["ring", "tree", "ps-sharded"])
def test_the_event_engine_agrees_when_events_change_nothing(algo):
    g = tp.make_graph("dcell", n=3, k=1, bw_mbps=BW)
    schedule = build(algo, g, 40_004)
    options = {"startup_s": 1e-4, "hop_latency_s": 1e-5}
    plain = simulate(g, schedule, **options)
    late = simulate(with_link_failure(g, *next(iter(g.edges)), 1e3), schedule, **options)
    assert late.finish_s == pytest.approx(plain.finish_s, rel=1e-9)
    assert late.start_s == pytest.approx(plain.start_s, rel=1e-9, abs=1e-15)


def test_graphs_without_events_skip_the_event_engine(monkeypatch):
    def refuse(*args, **kwargs):
        raise AssertionError("event engine used without events")

    monkeypatch.setattr(events, "with_events", refuse)
    assert simulate(bcube(), plan(send(0, DIRECT, 1e7))).makespan_s == pytest.approx(0.1)


def test_result_rerouted_round_trip_and_old_documents():
    r = Result(1.0, {0: 0.0, 1: 0.5}, {0: 0.5, 1: 1.0}, rerouted=(1,))
    assert r.to_dict()["rerouted"] == [1]
    assert Result.from_json(r.to_json()) == r
    plain = Result(1.0, {0: 0.0}, {0: 1.0})
    assert "rerouted" not in plain.to_dict()
    assert Result.from_dict(plain.to_dict()).rerouted == ()
    doc = r.to_dict()
    doc["rerouted"] = ["1"]
    with pytest.raises(ValueError, match="result.rerouted"):
        Result.from_dict(doc)
