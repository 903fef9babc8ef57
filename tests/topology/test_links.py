"""Link attributes written once: rates, background load, failed links, and the paths and
capacities everything else reads from them."""

import pytest

import topology
from simulator import lower_bound, simulate
from topology import link_rate_mbps, with_background, with_link_rates, without_link
from traffic.collectives import BASELINES, build
from traffic.cuts import link_capacities
from traffic.schedule import validate


@pytest.fixture(scope="module")
def bcube():
    return topology.make_graph("bcube", n=2, k=1)


def test_rate_is_bandwidth_minus_background(bcube):
    g = with_background(with_link_rates(bcube, {("s00", "w0_0"): 8.0}), {("w0_0", "s00"): 3.0})
    assert link_rate_mbps(g, "s00", "w0_0") == link_rate_mbps(g, "w0_0", "s00") == 5.0
    assert link_rate_mbps(g, "s01", "w0_0") == 10.0
    assert link_capacities(g, 1.0)[("w0_0", "s00")] == 5e6
    assert g.graph["degraded"] == ["rates s00-w0_0=8", "background w0_0-s00=3"]
    # The original is untouched.
    assert link_rate_mbps(bcube, "s00", "w0_0") == 10.0 and "degraded" not in bcube.graph


@pytest.mark.parametrize("call,match", [
    (lambda g: link_rate_mbps(g, "s00", "s11"), "s00-s11 is not a link"),
    (lambda g: with_background(g, {("s00", "w0_0"): 10.0}), "leaves no capacity"),
    (lambda g: with_link_rates(g, {("s00", "w0_0"): 0}), "rate must be > 0"),
    (lambda g: with_link_rates(g, {("s00", "x"): 1}), "s00-x is not a link"),
])
def test_bad_link_changes_name_the_link(bcube, call, match):
    with pytest.raises(ValueError, match=match):
        call(bcube)


def test_failing_a_link_that_disconnects_is_refused():
    g = topology.make_graph("jellyfish", switches=8, ports=4, uplinks=3, seed=0)
    # A Jellyfish server has one link.
    a, b = next((a, b) for a, b in g.edges() if "server" in (g.nodes[a]["role"],
                                                             g.nodes[b]["role"]))
    with pytest.raises(ValueError, match="disconnects"):
        without_link(g, a, b)


def test_slow_link_slows_the_simulator_and_the_bound(bcube):
    ring = build("ring", bcube, 1 << 20)
    slow = with_link_rates(bcube, {e: 5.0 for e in bcube.edges()})
    assert simulate(slow, ring).makespan_s == pytest.approx(2 * simulate(bcube, ring).makespan_s)
    assert lower_bound(slow, 1 << 20) == pytest.approx(2 * lower_bound(bcube, 1 << 20))


@pytest.mark.parametrize("family,params", [("bcube", {"n": 3, "k": 1}),
                                           ("dcell", {"n": 3, "k": 1})])
def test_every_baseline_routes_around_a_failed_link(family, params):
    g = topology.make_graph(family, **params)
    a, b = next(iter(g.edges()))
    failed = without_link(g, a, b)
    for path in topology.paths(failed, "s00" if family == "bcube" else "s0_0",
                               sorted(topology.servers(failed))[-1], 3):
        assert all(failed.has_edge(x, y) for x, y in zip(path, path[1:]))
    for algo in BASELINES:
        schedule = build(algo, failed, 1 << 16)
        validate(schedule, failed)
        assert simulate(failed, schedule).makespan_s > 0


def test_fingerprint_follows_rates_and_links(bcube):
    fp = topology.fingerprint
    assert fp(bcube) == fp(topology.make_graph("bcube", n=2, k=1))
    assert fp(bcube) != fp(with_link_rates(bcube, {("s00", "w0_0"): 5.0}))
    assert fp(bcube) != fp(with_background(bcube, {("s00", "w0_0"): 1.0}))
    assert fp(bcube) != fp(without_link(bcube, "s00", "w0_0"))


def test_kept_answers_leave_the_cyclic_collectors_passes():
    import gc

    from topology.links import GraphMemo

    memo = GraphMemo(2)
    answer = memo.get("key", lambda: [object()])
    try:
        assert gc.get_freeze_count() > 0
        assert not any(o is answer for o in gc.get_objects())
        assert memo.get("key", list) is answer  # kept, not made again
    finally:
        gc.unfreeze()
    assert any(o is answer for o in gc.get_objects())
