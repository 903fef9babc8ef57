"""The fluid simulator against closed forms, max-min fairness, latency and start-up costs, and
the lower bound."""

from __future__ import annotations

import networkx as nx
import numpy as np
import pytest

import topology as tp
from simulator import Result, fluid, lower_bound, max_min_rates, simulate
from simulator.maxmin import max_min_small
from traffic.collectives import ALGORITHMS, build, ps, ring
from traffic.schedule import Schedule, ScheduleError, Transfer

BW = 100.0  # Mbit/s


def star(servers: int, bw=BW) -> nx.Graph:
    """Servers h0.. on one switch w, no spec; ``bw`` may give per-server rates."""
    g = nx.Graph()
    g.add_node("w", role="switch")
    for i in range(servers):
        g.add_node(f"h{i}", role="server", rank=i)
        g.add_edge(f"h{i}", "w", bw_mbps=bw[i] if isinstance(bw, list) else bw)
    return g


def cycle(servers: int) -> nx.Graph:
    """Servers directly linked in a cycle: ring neighbours are one link apart."""
    g = nx.Graph()
    for i in range(servers):
        g.add_node(f"h{i}", role="server", rank=i)
    for i in range(servers):
        g.add_edge(f"h{i}", f"h{(i + 1) % servers}", bw_mbps=BW)
    return g


def plan(*transfers: Transfer, elements: int) -> Schedule:
    return Schedule({"family": "custom", "params": {}}, 4 * elements, "float32",
                    tuple(transfers))


def seconds(nbytes: float, bw_mbps: float = BW) -> float:
    return nbytes * 8 / (bw_mbps * 1e6)


def test_one_transfer_takes_size_over_bandwidth():
    g = star(2)
    r = simulate(g, plan(Transfer(0, "h0", "h1", 0, 250_000, "reduce", ("h0", "w", "h1")),
                         elements=250_000))
    assert r.makespan_s == pytest.approx(seconds(1e6), rel=1e-12)
    assert r.start_s == {0: 0.0}
    assert r.finish_s[0] == r.makespan_s


def test_two_transfers_sharing_a_link_take_twice_as_long():
    g = star(3)
    both = plan(Transfer(0, "h0", "h2", 0, 1000, "reduce", ("h0", "w", "h2")),
                Transfer(1, "h1", "h2", 0, 1000, "reduce", ("h1", "w", "h2")),
                elements=1000)
    r = simulate(g, both)
    assert r.finish_s[0] == pytest.approx(2 * seconds(4000), rel=1e-12)
    assert r.finish_s[1] == pytest.approx(2 * seconds(4000), rel=1e-12)


def test_opposite_directions_do_not_share():
    g = star(2)
    r = simulate(g, plan(Transfer(0, "h0", "h1", 0, 1000, "reduce", ("h0", "w", "h1")),
                         Transfer(1, "h1", "h0", 0, 1000, "reduce", ("h1", "w", "h0")),
                         elements=1000))
    assert r.makespan_s == pytest.approx(seconds(4000), rel=1e-12)


def test_max_min_fair_shares_and_reallocation():
    # w->h2 (60 Mbit/s) is shared by A and B: 30 each; C shares h0->w with A and gets the
    # other 70 until A ends, then all 100.
    g = star(4, bw=[BW, BW, 60.0, BW])
    a = Transfer(0, "h0", "h2", 0, 93_750, "reduce", ("h0", "w", "h2"))   # 3 Mbit
    b = Transfer(1, "h1", "h2", 0, 93_750, "reduce", ("h1", "w", "h2"))   # 3 Mbit
    c = Transfer(2, "h0", "h3", 0, 437_500, "reduce", ("h0", "w", "h3"))  # 14 Mbit
    r = simulate(g, plan(a, b, c, elements=437_500))
    assert r.finish_s[0] == pytest.approx(0.1, rel=1e-9)
    assert r.finish_s[1] == pytest.approx(0.1, rel=1e-9)
    assert r.finish_s[2] == pytest.approx(0.1 + 7e6 / 100e6, rel=1e-9)


def test_max_min_rates_progressive_filling():
    cap = np.array([0.5, 2.0, 3.0, np.inf])
    links = np.array([[0, 1], [1, 3], [1, 2], [2, 3]])
    # Link 0 holds flow 0 at 0.5; link 1 then leaves 0.75 each for flows 1 and 2; flow 3
    # takes what is left of link 2.
    assert max_min_rates(links, cap).tolist() == pytest.approx([0.5, 0.75, 0.75, 2.25])


def test_dependencies_startup_and_hop_latency():
    g = star(3)
    first = Transfer(0, "h0", "h1", 0, 1000, "reduce", ("h0", "w", "h1"))
    second = Transfer(1, "h1", "h2", 0, 1000, "reduce", ("h1", "w", "h2"), (0,))
    schedule = plan(first, second, elements=1000)
    one = seconds(4000)
    r = simulate(g, schedule, startup_s=0.5, hop_latency_s=0.01)
    assert r.start_s[0] == pytest.approx(0.5)
    assert r.finish_s[0] == pytest.approx(0.5 + one + 0.02)
    assert r.start_s[1] == pytest.approx(r.finish_s[0] + 0.5)
    assert r.makespan_s == pytest.approx(2 * (0.5 + one + 0.02))


def test_goodput_scales_capacity():
    g = star(2)
    schedule = plan(Transfer(0, "h0", "h1", 0, 1000, "reduce", ("h0", "w", "h1")),
                    elements=1000)
    assert simulate(g, schedule, goodput=0.5).makespan_s == pytest.approx(2 * seconds(4000))


@pytest.mark.parametrize("servers", [2, 3, 5, 8])
def test_ring_on_one_hop_neighbours_matches_closed_form(servers):
    size = 4 * servers * 1000
    r = simulate(cycle(servers), ring(cycle(servers), size))
    assert r.makespan_s == pytest.approx(2 * (servers - 1) / servers * seconds(size),
                                         rel=1e-9)


def test_bcube_ring_matches_closed_form():
    g = tp.make_graph("bcube", n=4, k=1, bw_mbps=BW)
    size = 16 * 4 * 1000
    assert simulate(g, ring(g, size)).makespan_s == pytest.approx(
        2 * 15 / 16 * seconds(size), rel=1e-9)


@pytest.mark.parametrize("servers", [2, 4, 7])
def test_ps_on_a_star_is_bounded_by_the_ps_link(servers):
    g = star(servers)
    size = 4000
    link = (servers - 1) * seconds(size)  # everything crosses the root's link each way
    plain = simulate(g, ps(g, size)).makespan_s
    assert plain == pytest.approx(2 * link, rel=1e-9)
    piped = simulate(g, ps(g, size, chunks=8)).makespan_s
    assert link * (1 - 1e-9) <= piped < plain


@pytest.mark.parametrize("family", tp.FAMILIES)
def test_makespan_never_below_lower_bound(family):
    g = tp.make_graph(family, bw_mbps=BW)
    for size in (4_000, 400_004):
        bound = lower_bound(g, size)
        for algo in ALGORITHMS:
            schedule = build(algo, g, size)
            assert simulate(g, schedule).makespan_s >= bound * (1 - 1e-9), algo
            slow = simulate(g, schedule, startup_s=1e-4, hop_latency_s=1e-5)
            assert slow.makespan_s >= bound, algo


@pytest.mark.parametrize(("family", "params"), [("bcube", {"n": 4, "k": 1}),
                                                ("bcube", {"n": 3, "k": 2}),
                                                ("dcell", {"n": 4, "k": 1}),
                                                ("jellyfish", {})])
def test_multitree_meets_the_bound(family, params):
    g = tp.make_graph(family, bw_mbps=BW, **params)
    size = 4 * 6000 * len(tp.servers(g))  # every part, ring chunk and BCube piece equal
    assert simulate(g, build("multitree", g, size)).makespan_s == pytest.approx(
        lower_bound(g, size), rel=1e-9)


def test_lower_bound_values():
    g = tp.make_graph("bcube", n=4, k=1, bw_mbps=BW)
    assert lower_bound(g, 10**6) == pytest.approx(2 * 15 / 16 * seconds(1e6) / 2)
    assert lower_bound(tp.make_graph("jellyfish", bw_mbps=BW), 10**6) == pytest.approx(
        2 * 15 / 16 * seconds(1e6))
    # One thin server: it must still send and receive its whole buffer.
    thin = star(4, bw=[1.0, BW, BW, BW])
    assert lower_bound(thin, 10**6) == pytest.approx(seconds(1e6, 1.0))
    assert lower_bound(star(1), 10**6) == 0.0
    with pytest.raises(ValueError, match="size_bytes"):
        lower_bound(g, -1)


def test_bad_schedules_and_options():
    g = star(2)
    loop = plan(Transfer(0, "h0", "h1", 0, 1, "reduce", ("h0", "w", "h1"), (1,)),
                Transfer(1, "h1", "h0", 0, 1, "copy", ("h1", "w", "h0"), (0,)), elements=1)
    with pytest.raises(ScheduleError, match="cycle"):
        simulate(g, loop)
    off_graph = plan(Transfer(0, "h0", "h1", 0, 1, "reduce", ("h0", "h1")), elements=1)
    with pytest.raises(ScheduleError, match="not a link"):
        simulate(g, off_graph)
    unknown = plan(Transfer(0, "h0", "h1", 0, 1, "reduce", ("h0", "w", "h1"), (5,)),
                   elements=1)
    with pytest.raises(ScheduleError, match="unknown transfer 5"):
        simulate(g, unknown)
    fine = plan(Transfer(0, "h0", "h1", 0, 1, "reduce", ("h0", "w", "h1")), elements=1)
    for option in ({"startup_s": -1}, {"hop_latency_s": float("nan")}, {"goodput": 0},
                   {"goodput": 1.5}):
        with pytest.raises(ValueError):
            simulate(g, fine, **option)


def test_empty_schedule():
    assert simulate(star(1), plan(elements=1)).makespan_s == 0.0


def test_result_round_trip():
    g = tp.make_graph("bcube", bw_mbps=BW)
    r = simulate(g, build("tree", g, 4_000))
    assert Result.from_dict(r.to_dict()) == r
    assert Result.from_json(r.to_json()) == r
    assert all(isinstance(k, str) for k in r.to_dict()["finish_s"])
    assert all(isinstance(k, int) for k in Result.from_json(r.to_json()).finish_s)
    doc = r.to_dict()
    doc["extra"] = 1
    with pytest.raises(ValueError, match="unknown field 'extra'"):
        Result.from_dict(doc)
    doc = r.to_dict()
    doc["makespan_s"] = "soon"
    with pytest.raises(ValueError, match="result.makespan_s"):
        Result.from_dict(doc)
    with pytest.raises(ValueError, match="missing the field 'source'"):
        Result.from_dict({"makespan_s": 1.0, "start_s": {}, "finish_s": {}})


def test_max_min_kernels_agree():
    rng = np.random.default_rng(7)
    for _ in range(200):
        nl, m = int(rng.integers(2, 9)), int(rng.integers(1, 12))
        cap = rng.choice([1.0, 2.0, 3.0, 5.0], nl).tolist()
        paths = [tuple(rng.choice(nl, int(rng.integers(1, min(4, nl) + 1)),
                                  replace=False).tolist()) for _ in range(m)]
        table = np.full((m, max(map(len, paths))), nl)
        for f, p in enumerate(paths):
            table[f, :len(p)] = p
        assert max_min_small(paths, cap) == pytest.approx(
            max_min_rates(table, np.array(cap + [np.inf])).tolist(), rel=1e-9)


ENGINES = ["incremental", "vectorised", "compiled"]


@pytest.mark.parametrize("algo", ALGORITHMS)
def test_all_engines_agree(algo, monkeypatch):
    g = tp.make_graph("dcell", n=3, k=1, bw_mbps=BW)
    schedule = build(algo, g, 40_004)
    options = {"startup_s": 1e-4, "hop_latency_s": 1e-5}
    results = {}
    for engine in ENGINES:
        monkeypatch.setattr(fluid, "ENGINE", engine)
        results[engine] = simulate(g, schedule, **options)
    reference = results["incremental"]
    for engine in ENGINES[1:]:
        assert results[engine].start_s.keys() == reference.start_s.keys()
        for tid, when in reference.finish_s.items():
            assert results[engine].finish_s[tid] == pytest.approx(when, rel=1e-9), engine
            assert results[engine].start_s[tid] == pytest.approx(reference.start_s[tid],
                                                                 rel=1e-9, abs=1e-15)


def test_the_compiled_engine_runs_by_default():
    assert fluid.compiled is not None and fluid.ENGINE == "auto"


@pytest.mark.parametrize("engine", ENGINES)
def test_every_engine_rejects_bad_dependencies(engine, monkeypatch):
    monkeypatch.setattr(fluid, "ENGINE", engine)
    g = star(2)
    hop = ("h0", "w", "h1")
    with pytest.raises(ScheduleError, match="transfer 1: depends on unknown transfer 7"):
        simulate(g, plan(Transfer(0, "h0", "h1", 0, 1, "reduce", hop),
                         Transfer(1, "h0", "h1", 0, 1, "reduce", hop, (7,)), elements=1))
    with pytest.raises(ScheduleError, match="cycle"):
        simulate(g, plan(Transfer(0, "h0", "h1", 0, 1, "reduce", hop, (1,)),
                         Transfer(1, "h0", "h1", 0, 1, "reduce", hop, (0,)), elements=1))


#: Makespans (s) of many-flow schedules at 8 MB on 100 Mbit/s links, as the simulator gave them
#: before events re-solved only the flows whose rate can change; DCell multitree (many
#: concurrent rings) is chaotic, so float rounding may move it by more than the others.
MANY_FLOWS = [
    ("bcube", {"n": 4, "k": 2}, "ps-sharded", 1.0131512601312738, 1e-9),
    ("jellyfish", {"switches": 30, "ports": 5, "uplinks": 3, "seed": 0}, "double-tree",
     1.7382519422498364, 1e-9),
    ("dcell", {"n": 6, "k": 1}, "multitree", 0.6247868800011347, 1e-6),
    ("bcube", {"n": 4, "k": 2}, "ring", 1.260000000000001, 1e-12),
    ("dcell", {"n": 4, "k": 1}, "ps-sharded", 1.536, 1e-12),
    # Pipelined trees: thousands of flows on a few dozen paths (the compiled loop's path
    # classes); the figure is the reference engines' from before the classes.
    ("dcell", {"n": 3, "k": 1}, "packing", 0.6070769930300441, 1e-9),
]


@pytest.mark.slow
@pytest.mark.parametrize("family,params,algo,makespan,rel", MANY_FLOWS,
                         ids=[f"{f}-{a}" for f, _, a, _, _ in MANY_FLOWS])
@pytest.mark.parametrize("engine", ENGINES)
def test_many_flow_answers_unchanged(family, params, algo, makespan, rel, engine,
                                     monkeypatch):
    g = tp.make_graph(family, bw_mbps=BW, **params)
    schedule = build(algo, g, 8_000_000)
    monkeypatch.setattr(fluid, "ENGINE", engine)
    assert simulate(g, schedule).makespan_s == pytest.approx(makespan, rel=rel)


@pytest.mark.slow
def test_compiled_engine_agrees_per_transfer_where_the_rate_index_chooses():
    # All-to-all over BCube(4,2): about half the compiled loop's events take the flows to
    # re-solve from its rate index rather than walking the links; every transfer's times
    # must still be the reference engine's.
    g = tp.make_graph("bcube", n=4, k=2, bw_mbps=BW)
    g.edges["s000", "w0_00"]["bw_mbps"] = BW / 4  # unequal rates: many rate levels
    schedule = build("ps-sharded", g, 400_000)
    results = {}
    for engine in ("vectorised", "compiled"):
        monkeypatch = pytest.MonkeyPatch()
        monkeypatch.setattr(fluid, "ENGINE", engine)
        results[engine] = simulate(g, schedule)
        monkeypatch.undo()
    for tid, when in results["vectorised"].finish_s.items():
        assert results["compiled"].finish_s[tid] == pytest.approx(when, rel=1e-9)
        assert results["compiled"].start_s[tid] == pytest.approx(
            results["vectorised"].start_s[tid], rel=1e-9, abs=1e-15)


def test_flows_sharing_a_path_keep_their_own_sizes_and_start_times(monkeypatch):
    # The compiled loop runs flows of one path as one class at one rate, each finishing when
    # the class's service reaches its own size: members of unequal sizes joining and leaving
    # at different times, beside flows on overlapping paths, finish when the reference
    # engine says.
    rng = np.random.default_rng(3)
    g = star(4, bw=[BW, BW, BW / 2, BW])
    paths = [("h0", "w", "h1"), ("h2", "w", "h1"), ("h0", "w", "h3"), ("h3", "w", "h2")]
    transfers = []
    for i in range(60):
        deps = tuple(sorted({int(d) for d in rng.integers(0, i, 2)})) if i > 4 else ()
        transfers.append(Transfer(i, "x", "y", 0, int(rng.integers(1, 40_000)), "reduce",
                                  paths[int(rng.integers(0, 4))], deps))
    transfers = [Transfer(t.id, t.path[0], t.path[-1], 0, t.count, "reduce", t.path, t.deps)
                 for t in transfers]
    schedule = plan(*transfers, elements=40_000)
    results = {}
    for engine in ("incremental", "compiled"):
        monkeypatch.setattr(fluid, "ENGINE", engine)
        results[engine] = simulate(g, schedule, startup_s=1e-4)
    for tid, when in results["incremental"].finish_s.items():
        assert results["compiled"].finish_s[tid] == pytest.approx(when, rel=1e-9)


def test_a_path_class_queue_pops_by_service_then_flow():
    from simulator import compiled

    key = np.array([5.0, 2.0, 2.0, 9.0, 1.0, 2.0, 7.0, 0.5])
    left, right = np.full(8, -1, dtype=np.int64), np.full(8, -1, dtype=np.int64)
    root = -1
    for f in (3, 5, 0, 2, 7, 1, 6, 4):
        root = compiled._meld(root, f, key, left, right)
    order = []
    while root >= 0:
        order.append(root)
        root = compiled._meld(left[root], right[root], key, left, right)
    assert order == [7, 4, 1, 2, 5, 0, 6, 3]


def test_group_by_parent_is_a_stable_counting_sort():
    from simulator import compiled

    parent = np.array([2, 0, 2, 1, 0], dtype=np.int64)
    child = np.array([3, 3, 4, 4, 5], dtype=np.int64)
    cptr, cidx = compiled.group_by_parent(parent, child, 6)
    assert cptr.tolist() == [0, 2, 3, 5, 5, 5, 5]
    assert cidx.tolist() == [3, 5, 4, 3, 4]


def test_the_indexed_heap_pops_in_time_then_flow_order():
    from simulator import compiled

    n = 8
    key, flow, pos = np.empty(n), np.empty(n, dtype=np.int64), np.full(n, -1, dtype=np.int64)
    size = 0
    for f, when in [(5, 3.0), (1, 2.0), (7, 2.0), (2, 9.0), (0, 1.0)]:
        size = compiled._hset(key, flow, pos, size, f, when)
    size = compiled._hset(key, flow, pos, size, 2, 0.5)   # moved earlier
    size = compiled._hset(key, flow, pos, size, 0, 4.0)   # moved later
    order = []
    while size:
        order.append(int(flow[0]))
        size = compiled._hpop(key, flow, pos, size)
    assert order == [2, 1, 7, 5, 0]
    assert (pos == -1).all()
