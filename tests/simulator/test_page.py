"""The run report page, built from a stored results document (pure: no browser, no network).

The stored document is the results.json of a real emulated run:
``sudo python -m emulation.run --topo bcube --n 2 --k 1 --scheduler ring,multitree
--size-mb 0.2``.
"""

from __future__ import annotations

import copy
import json
import shutil
import subprocess
import sys
from pathlib import Path

import pytest

from simulator import page
from simulator.usage import LinkLoad

STORED = Path(__file__).parent / "data" / "bcube21-emulated.json"
REPO = Path(__file__).resolve().parents[2]


@pytest.fixture
def doc() -> dict:
    return json.loads(STORED.read_text())


def test_the_stored_document_follows_the_schema(doc):
    page.check(doc)
    assert doc["schema"] == page.SCHEMA
    for row in doc["schedulers"]:
        assert {"emulated_links", "simulated_links", "transfer_list"} <= set(row)
        assert len(row["transfer_list"]) == row["transfers"]
        for key in ("emulated_links", "simulated_links"):
            load = LinkLoad.from_dict(row[key])
            assert len(load.mbps) == 2 * len(doc["network"]["links"])


@pytest.mark.parametrize("mutate,message", [
    (lambda d: d.pop("network"), "results has no field 'network'"),
    (lambda d: d.pop("schema"), "results has no field 'schema'"),
    (lambda d: d.update(schema=1), "results.schema is 1"),
    (lambda d: d.update(size_bytes=True), "results.size_bytes must be int"),
    (lambda d: d.update(source="guess"), "results.source must be emulation or simulator"),
    (lambda d: d["network"]["nodes"][0].pop("x"), r"results.network.nodes\[0\] has no field"),
    (lambda d: d["network"]["links"][0].update(a="nowhere"), "'nowhere' is not a node"),
    (lambda d: d.update(schedulers=[]), "results.schedulers is empty"),
    (lambda d: d["schedulers"][1].pop("transfer_list"),
     r"results.schedulers\[1\] has no field 'transfer_list'"),
    (lambda d: d["schedulers"][0]["emulated_links"]["links"][0].update(mbps=[1.0]),
     r"results.schedulers\[0\].emulated_links: link load: .* values for"),
    (lambda d: d["schedulers"][0]["simulated"].pop("finish_s"),
     r"results.schedulers\[0\].simulated has no field 'finish_s'"),
])
def test_a_malformed_document_is_refused_naming_the_field(doc, mutate, message):
    mutate(doc)
    with pytest.raises(page.ReportError, match=message):
        page.check(doc)


def test_link_records_are_each_links_average_load_in_percent(doc):
    records = page.link_records(doc)
    names = [row["scheduler"] for row in doc["schedulers"]]
    assert len(records) == len(names) * 2 * len(doc["network"]["links"])
    ring = doc["schedulers"][names.index("ring")]
    load = LinkLoad.from_dict(ring["simulated_links"])
    end = max(ring["simulated"]["finish_s"].values())
    rate = doc["bw_mbps"]
    for r in records:
        if r["scheduler"] == "ring" and r["source"] == "simulated":
            a, b = r["link"].split("-")
            expect = 100 * max(load.mean_mbps(a, b, end), load.mean_mbps(b, a, end)) / rate
            assert r["util"] == pytest.approx(expect, abs=0.05)
            assert 0 <= r["util"] <= 100
    emulated = [r["util"] for r in records if r["source"] == "emulated"]
    assert max(emulated) > 50  # the run filled some links


def test_busiest_records_rank_links_by_load(doc):
    records = page.busiest_records(doc, count=5)
    for name in ("ring", "multitree"):
        mine = [r for r in records if r["scheduler"] == name]
        assert sorted({r["rank"] for r in mine}) == list(range(5))
        assert {r["source"] for r in mine} == {"emulated", "simulated"}
        for r in mine:
            assert len(r["t0"]) == len(r["t1"]) == len(r["u"])
            assert all(a < b for a, b in zip(r["t0"], r["t1"]))


def test_server_records_count_transfers_in_flight(doc):
    records = page.server_records(doc, bins=20)
    row = doc["schedulers"][0]
    start, finish = row["simulated"]["start_s"], row["simulated"]["finish_s"]
    for r in records:
        if r["scheduler"] != row["scheduler"] or r["source"] != "simulated":
            continue
        mine = [t for t in row["transfer_list"]
                if t[1 if r["direction"] == "sends" else 2] == r["server"]]
        busy = sum(finish[str(t[0])] - start[str(t[0])] for t in mine)
        width = r["t1"][0] - r["t0"][0]
        assert sum(r["n"]) * width == pytest.approx(busy, rel=1e-2, abs=1e-4)


def test_the_page_is_self_contained_and_drawn_from_the_document_alone(doc):
    html = page.build(doc)
    assert html == page.build(copy.deepcopy(doc))  # nothing else goes in
    assert "vegaEmbed" in html and 'id="controls"' in html and 'id="charts"' in html
    for name in ("ring", "multitree"):
        assert f"<td>{name}</td>" in html
    assert "http://" not in html.split("<script>")[0]  # no external stylesheet or script
    assert '<script src=' not in html and '<link rel="stylesheet"' not in html
    assert doc["command"] in html


def test_every_chart_reads_a_dataset_the_spec_carries(doc):
    vega = page.spec(doc)

    def names(node):
        if isinstance(node, dict):
            data = node.get("data")
            if isinstance(data, dict) and "name" in data:
                yield data["name"]
            for value in node.values():
                yield from names(value)
        elif isinstance(node, list):
            for value in node:
                yield from names(value)

    used = set(names(vega))
    assert used == set(page.tables(doc)) <= set(vega["datasets"])
    assert vega["datasets"]["makespans"] == page.makespan_records(doc)
    assert vega["datasets"]["servers"] == page.server_records(doc)


def test_markup_in_the_document_cannot_end_a_script(doc):
    doc["command"] = "run </script><script>alert(1)</script>"
    doc["schedulers"][0]["scheduler"] = "x</script><b>"
    html = page.build(doc)
    tail = html.split('<div id="controls">', 1)[1]
    assert tail.count("</script>") == 1  # only the embedding script's own end tag
    assert "&lt;/script&gt;&lt;script&gt;alert(1)" in tail


def test_the_simulator_writes_the_same_page(tmp_path):
    out = tmp_path / "sim.html"
    proc = subprocess.run(
        [sys.executable, "-m", "simulator", "--topo", "bcube", "--n", "2", "--k", "1",
         "--algo", "ring", "--size-mb", "0.1", "--startup-s", "0.001", "--report", str(out)],
        capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    doc = page.read(out.with_suffix(".json"))
    assert doc["source"] == "simulator"
    assert doc["costs"]["startup_s"] == 0.001
    row = doc["schedulers"][0]
    assert row["emulated_s"] is None and "emulated_links" not in row
    assert "vegaEmbed" in out.read_text()
    assert "--report" in doc["command"]


@pytest.mark.parametrize("argv,message", [
    (["--report", "x.json"], "--report x.json: give the page's name"),
    (["--report", "/nonexistent/dir/x.html"], "--report /nonexistent/dir/x.html:"),
])
def test_the_simulator_refuses_a_bad_report_path(argv, message):
    proc = subprocess.run(
        [sys.executable, "-m", "simulator", "--topo", "bcube", "--n", "2", "--k", "1",
         "--algo", "ring", "--size-mb", "0.1", *argv],
        capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_emulation_report_rebuilds_the_page_from_a_run_directory(tmp_path):
    run = tmp_path / "run"
    run.mkdir()
    shutil.copy(STORED, run / "results.json")
    proc = subprocess.run([sys.executable, "-m", "emulation.report", str(run)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 0, proc.stderr
    assert (run / "report.html").read_text() == page.build(json.loads(STORED.read_text()))
    assert "report.html" in proc.stdout


@pytest.mark.parametrize("content,message", [
    (None, "no such file"),
    ("{", "not JSON"),
    ('{"name": "old"}', "has no field"),
])
def test_emulation_report_refuses_a_bad_directory(tmp_path, content, message):
    if content is not None:
        (tmp_path / "results.json").write_text(content)
    proc = subprocess.run([sys.executable, "-m", "emulation.report", str(tmp_path)],
                          capture_output=True, text=True, cwd=REPO, timeout=120)
    assert proc.returncode == 2
    assert message in proc.stderr and "Traceback" not in proc.stderr
    assert len(proc.stderr.strip().splitlines()) == 1


def test_script_bundle_is_kept_per_version(tmp_path, monkeypatch):
    vl_convert = pytest.importorskip("vl_convert")
    made = []
    monkeypatch.setattr(vl_convert, "javascript_bundle", lambda: made.append(1) or "var x;")
    assert page._bundle.__wrapped__(tmp_path) == "var x;"
    assert page._bundle.__wrapped__(tmp_path) == "var x;"
    assert len(made) == 1
    assert [p.name for p in tmp_path.iterdir()] == [
        f"vega-bundle-{vl_convert.__version__}.js"]
    unwritable = tmp_path / "file"
    unwritable.write_text("")
    assert page._bundle.__wrapped__(unwritable / "cache") == "var x;"
    assert len(made) == 2
