"""simulator.frames: the drain of full round-robin queues fed by full links, in frames."""

from __future__ import annotations

import pytest

from simulator import fluid, simulate
from simulator.frames import frame_tails
from simulator.usage import link_load
from topology import make_graph
from topology.links import with_background_flow, with_link_failure
from traffic.collectives import build
from traffic.schedule import Schedule, Transfer

FRAME = 9014
GROUP = ("s00", "s01", "s02", "s03")


def _schedule(pairs, count=25_000):
    """One wave: a transfer of ``count`` float32 per (src, dst), over w0_0."""
    return Schedule({"family": "bcube", "params": {"n": 4, "k": 1}}, 4 * count * len(pairs),
                    "float32", tuple(Transfer(i, a, b, i * count, count, "copy", (a, "w0_0", b))
                                     for i, (a, b) in enumerate(pairs)))


def test_a_mesh_of_full_links_drains_two_frames_per_link():
    """Every link of the mesh carries three flows from three full links: (3 - 1) frames."""
    graph = make_graph("bcube", n=4, k=1, bw_mbps=4.0)
    mesh = _schedule([(a, b) for a in GROUP for b in GROUP if a != b])
    tails = frame_tails(graph, mesh, FRAME)
    assert tails == pytest.approx([2 * FRAME * 8 / 4e6] * len(mesh.transfers))
    fluid = simulate(graph, mesh).makespan_s
    assert simulate(graph, mesh, frame_bytes=FRAME).makespan_s == pytest.approx(
        fluid + 2 * FRAME * 8 / 4e6)


@pytest.mark.parametrize("pairs", [
    [("s00", "s01")],                                   # one flow
    [("s00", "s01"), ("s00", "s02"), ("s00", "s03")],   # fan-out: later links not full
    [("s01", "s00"), ("s02", "s00"), ("s03", "s00")],   # fan-in: feeding links not full
])
def test_no_drain_where_the_fluid_model_is_exact(pairs):
    graph = make_graph("bcube", n=4, k=1)
    schedule = _schedule(pairs)
    assert frame_tails(graph, schedule, FRAME) == [0.0] * len(pairs)
    assert simulate(graph, schedule, frame_bytes=FRAME).makespan_s == \
        simulate(graph, schedule).makespan_s


def test_a_ring_and_a_tree_pay_nothing():
    graph = make_graph("bcube", n=4, k=1)
    for algo in ("ring", "tree"):
        schedule = build(algo, graph, 1_000_000)
        assert max(frame_tails(graph, schedule, FRAME)) == 0.0


@pytest.mark.parametrize("engine", ["compiled", "incremental", "vectorised"])
def test_every_engine_and_network_events_take_the_tails(engine, monkeypatch):
    monkeypatch.setattr(fluid, "ENGINE", engine)
    graph = make_graph("bcube", n=4, k=1)
    schedule = build("multitree", graph, 1_000_000)
    plain = simulate(graph, schedule).makespan_s
    framed = simulate(graph, schedule, frame_bytes=FRAME).makespan_s
    assert framed > plain
    tails = frame_tails(graph, schedule, FRAME)
    result = simulate(graph, schedule, frame_bytes=FRAME)
    last = max(range(len(tails)), key=lambda i: result.finish_s[schedule.transfers[i].id])
    assert tails[last] > 0  # the last arrival carries a tail
    # the same network through the event loop (a background flow that ends nowhere near)
    slow = with_background_flow(graph, "s33", "s32", 1e-6)
    assert simulate(slow, schedule, frame_bytes=FRAME).makespan_s == pytest.approx(
        framed, rel=1e-3)
    failing = with_link_failure(graph, "s00", "w0_0", 0.3)
    assert simulate(failing, schedule, frame_bytes=FRAME).makespan_s > \
        simulate(failing, schedule).makespan_s


def test_bad_frame_size_is_refused():
    graph = make_graph("bcube", n=2, k=1)
    ring = build("ring", graph, 4096)
    with pytest.raises(ValueError, match="frame_bytes"):
        frame_tails(graph, ring, 0)
    for bad in (-1, float("nan")):
        with pytest.raises(ValueError, match="frame_bytes"):
            simulate(graph, ring, frame_bytes=bad)
        with pytest.raises(ValueError, match="frame_bytes"):
            link_load(graph, ring, frame_bytes=bad)


def test_a_transfer_sent_within_one_instant_gets_no_tail():
    """Its first and last trace entries share a time (a huge fixed cost swallows its
    sending time in float rounding): no feeding links were ever recorded for it."""
    graph = make_graph("bcube", n=2, k=1)
    ring = build("ring", graph, 4)
    assert frame_tails(graph, ring, FRAME, startup_s=1e12) == [0.0] * len(ring.transfers)


def test_simulate_then_link_load_measure_the_tails_once(monkeypatch):
    """emulation.run asks simulate and link_load for one schedule's tails in turn: one
    event-loop run; another graph or other costs measure again."""
    import simulator.frames as frames

    runs = []
    real = frames.with_events
    monkeypatch.setattr(frames, "with_events", lambda *a, **k: runs.append(1) or real(*a, **k))
    graph = make_graph("bcube", n=4, k=1, bw_mbps=4.0)
    mesh = _schedule([(a, b) for a in GROUP for b in GROUP if a != b])
    framed = simulate(graph, mesh, frame_bytes=FRAME)
    link_load(graph, mesh, frame_bytes=FRAME)
    assert len(runs) == 1
    slower = make_graph("bcube", n=4, k=1, bw_mbps=2.0)
    assert simulate(slower, mesh, frame_bytes=FRAME).makespan_s == pytest.approx(
        2 * framed.makespan_s)
    assert len(runs) == 2
    assert frame_tails(slower, mesh, FRAME, goodput=0.5) == pytest.approx(
        [2 * FRAME * 8 * 0.5 / 1e6] * len(mesh.transfers))
    assert len(runs) == 3


def test_the_kept_tails_follow_the_graphs_background_flows():
    """A steady background load and a background flow of the same rate on the same links
    have one fingerprint but other tails: the second graph is measured again."""
    import simulator.frames as frames
    from topology.links import with_background

    graph = make_graph("bcube", n=4, k=1, bw_mbps=4.0)
    fan_in = _schedule([("s01", "s00"), ("s02", "s00"), ("s03", "s00")])
    steady = with_background(graph, {("s02", "w0_0"): 3.0, ("w0_0", "s03"): 3.0})
    flow = with_background_flow(graph, "s02", "s03", 3.0)
    frames._LAST.clear()
    alone = frame_tails(flow, fan_in, FRAME)
    assert frame_tails(steady, fan_in, FRAME) != alone  # the case matters
    assert frame_tails(flow, fan_in, FRAME) == alone
    frame_tails(steady, fan_in, FRAME)
    flow.graph["background_flows"] = []  # changed in place: measured again
    assert frame_tails(flow, fan_in, FRAME) == frame_tails(flow.copy(), fan_in, FRAME)
