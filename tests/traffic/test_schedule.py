"""The Schedule: exact JSON round trip, field-naming errors, and the validator's rejections."""

from __future__ import annotations

import json

import networkx as nx
import pytest

import topology as tp
from traffic.collectives import build
from traffic.schedule import (
    BASE_TCP_PORT,
    Schedule,
    ScheduleError,
    Transfer,
    buffer_bytes,
    routes,
    segments,
    validate,
)

ELEMENTS = 8


def star(servers: int = 2, spec: bool = False) -> nx.Graph:
    """Servers h0.. on one switch w (no spec: a custom graph)."""
    g = nx.Graph()
    g.add_node("w", role="switch")
    for i in range(servers):
        g.add_node(f"h{i}", role="server", rank=i)
        g.add_edge(f"h{i}", "w", bw_mbps=10.0)
    if spec:
        g.graph["spec"] = {"family": "bcube", "params": {"n": servers, "k": 0}}
    return g


def plan(*transfers: Transfer, elements: int = ELEMENTS) -> Schedule:
    return Schedule(topology={"family": "custom", "params": {}}, size_bytes=4 * elements,
                    dtype="float32", transfers=tuple(transfers), algo="hand")


def t(tid, src, dst, op="reduce", deps=(), offset=0, count=ELEMENTS, path=None):
    return Transfer(tid, src, dst, offset, count, op, path or (src, "w", dst), tuple(deps))


def test_hand_schedule_is_valid():
    validate(plan(t(0, "h0", "h1"), t(1, "h1", "h0", "copy", deps=(0,))), star())


def test_missing_contribution_rejected():
    with pytest.raises(ScheduleError, match="missing the contribution of h1"):
        validate(plan(t(0, "h0", "h1")), star())


def test_broken_path_rejected():
    bad = t(0, "h0", "h1", path=("h0", "h1"))
    with pytest.raises(ScheduleError, match=r"transfer 0: path uses h0-h1, which is not a link"):
        validate(plan(bad, t(1, "h1", "h0", "copy", deps=(0,))), star())


def test_path_not_ending_at_dst_rejected():
    with pytest.raises(ScheduleError, match="transfer 0: path does not run from h0 to h1"):
        validate(plan(t(0, "h0", "h1", path=("h0", "w"))), star())


def test_dependency_cycle_rejected():
    with pytest.raises(ScheduleError, match="cycle"):
        validate(plan(t(0, "h0", "h1", deps=(1,)), t(1, "h1", "h0", "copy", deps=(0,))),
                 star())


def test_unknown_dependency_rejected():
    with pytest.raises(ScheduleError, match="transfer 0: depends on unknown transfer 7"):
        validate(plan(t(0, "h0", "h1", deps=(7,))), star())


def test_race_rejected():
    # h1 sends its buffer back while h0's reduce into it may still be arriving.
    with pytest.raises(ScheduleError, match="races"):
        validate(plan(t(0, "h0", "h1"), t(1, "h1", "h0", "copy")), star())


def test_double_count_rejected():
    with pytest.raises(ScheduleError, match="a second time"):
        validate(plan(t(0, "h0", "h1"), t(1, "h0", "h1", deps=(0,)),
                      t(2, "h1", "h0", "copy", deps=(1,))), star())


def test_non_local_dependency_rejected():
    g = star(3)
    bad = plan(t(0, "h0", "h1"), t(1, "h2", "h1", deps=(0,)))
    with pytest.raises(ScheduleError, match="transfer 1: depends on transfer 0"):
        validate(bad, g)


def test_segment_outside_buffer_rejected():
    with pytest.raises(ScheduleError, match="not inside the buffer"):
        validate(plan(t(0, "h0", "h1", offset=4)), star())


def test_switch_centric_servers_do_not_relay():
    spec = {"family": "jellyfish", "params": {}}
    g = nx.Graph(spec=spec)
    g.add_nodes_from(["w0", "w1"], role="switch")
    for rank, v in enumerate(["a", "b", "c"]):
        g.add_node(v, role="server", rank=rank)
    g.add_edges_from([("a", "w0"), ("b", "w0"), ("b", "w1"), ("c", "w1")], bw_mbps=1.0)
    relayed = Transfer(0, "a", "c", 0, 1, "reduce", ("a", "w0", "b", "w1", "c"))
    schedule = Schedule(spec, 4, "float32", (relayed,))
    with pytest.raises(ScheduleError, match="relays through server b"):
        validate(schedule, g)


def test_wrong_topology_rejected():
    schedule = build("ring", tp.make_graph("bcube", n=2, k=1), 64)
    with pytest.raises(ScheduleError, match="was made for"):
        validate(schedule, tp.make_graph("bcube", n=3, k=1))


@pytest.mark.parametrize("family", tp.FAMILIES)
def test_json_round_trip_is_exact(family):
    schedule = build("multitree", tp.make_graph(family), 4000, "float64")
    text = schedule.to_json()
    again = Schedule.from_json(text)
    assert again == schedule
    assert again.to_json() == text
    assert Schedule.from_json(schedule.to_json(indent=2)) == schedule


def _doc() -> dict:
    return json.loads(plan(t(0, "h0", "h1"), t(1, "h1", "h0", "copy", deps=(0,))).to_json())


def test_malformed_json_rejected():
    with pytest.raises(ScheduleError, match="not valid JSON"):
        Schedule.from_json("{nope")


def test_unknown_field_is_named():
    doc = _doc()
    doc["colour"] = "red"
    with pytest.raises(ScheduleError, match="unknown field 'colour'"):
        Schedule.from_json(json.dumps(doc))
    doc = _doc()
    doc["transfers"][1]["priority"] = 3
    with pytest.raises(ScheduleError, match=r"schedule.transfers\[1\] has an unknown field"):
        Schedule.from_json(json.dumps(doc))


def test_missing_and_mistyped_fields_are_named():
    doc = _doc()
    del doc["dtype"]
    with pytest.raises(ScheduleError, match="missing the field 'dtype'"):
        Schedule.from_json(json.dumps(doc))
    doc = _doc()
    doc["transfers"][0]["count"] = "8"
    with pytest.raises(ScheduleError, match=r"schedule.transfers\[0\].count must be a int"):
        Schedule.from_json(json.dumps(doc))
    doc = _doc()
    doc["transfers"][0]["deps"] = [True]
    with pytest.raises(ScheduleError, match=r"transfers\[0\].deps\[0\]"):
        Schedule.from_json(json.dumps(doc))


def test_bad_buffer_rejected():
    doc = _doc()
    doc["size_bytes"] = 30
    with pytest.raises(ScheduleError, match="size_bytes 30 is not a positive multiple of 4"):
        Schedule.from_json(json.dumps(doc))
    doc = _doc()
    doc["dtype"] = "float16"
    with pytest.raises(ScheduleError, match="dtype 'float16'"):
        Schedule.from_json(json.dumps(doc))
    doc = _doc()
    doc["schema_version"] = 99
    with pytest.raises(ScheduleError, match="schema_version"):
        Schedule.from_json(json.dumps(doc))


def test_routes_one_port_per_distinct_path():
    schedule = build("ring", tp.make_graph("bcube", n=4, k=1), 4000)
    found = routes(schedule)
    assert len(found) == 16
    assert [r.tcp_port for r in found] == list(range(BASE_TCP_PORT, BASE_TCP_PORT + 16))
    assert sum(len(r.transfer_ids) for r in found) == len(schedule.transfers)


def test_segments():
    assert segments(10, 4) == [(0, 3), (3, 3), (6, 2), (8, 2)]
    assert segments(2, 4) == [(0, 1), (1, 1)]


@pytest.mark.parametrize(("size_mb", "dtype", "expected"), [
    (8.0, "float32", 8_000_000),
    (4.1, "float64", 4_100_000),   # 4.1e6 / 8 is 512499.99...: rounded, not truncated
    (1e-9, "int32", 4),            # at least one element
    (0.000006, "int64", 8),        # 0.75 elements: nearest is one
])
def test_buffer_bytes_rounds_to_the_nearest_whole_element(size_mb, dtype, expected):
    assert buffer_bytes(size_mb, dtype) == expected


@pytest.mark.parametrize("size_mb", [0.0, -1.0, float("nan"), float("inf")])
def test_buffer_bytes_refuses_a_size_that_is_not_positive(size_mb):
    with pytest.raises(ValueError, match="--size-mb must be > 0"):
        buffer_bytes(size_mb, "float32")
