"""Schedules from anywhere: the hand-written example of docs/design.md, schedule files on the
simulator and emulation command lines, and scheduler plugins (module:function and an
installed entry point)."""

from __future__ import annotations

import json
import os
import pathlib
import re
import subprocess
import sys

import pytest

import topology as tp
from simulator import simulate
from traffic.plugins import make_schedule, resolve
from traffic.schedule import Schedule, validate

ROOT = pathlib.Path(__file__).resolve().parents[2]
PLUGIN = ROOT / "examples" / "scheduler-plugin"


def cli(module: str, *args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", module, *args], cwd=ROOT, capture_output=True,
                          text=True, timeout=300, env={**os.environ, **(env or {})})


def doc_example() -> str:
    text = (ROOT / "docs" / "design.md").read_text()
    section = text[text.index("### Schedule files"):]
    return re.search(r"```json\n(.*?)```", section, re.S).group(1)


def test_the_documented_example_is_valid_and_simulates():
    schedule = Schedule.from_json(doc_example())
    graph = tp.make_graph("bcube", n=2, k=0)
    validate(schedule, graph)
    # 4 bytes per transfer at 10 Mbit/s, two rounds.
    assert simulate(graph, schedule).makespan_s == pytest.approx(2 * 32 / 10e6)


def test_simulator_and_emulation_take_the_file(tmp_path):
    path = tmp_path / "by-hand.json"
    path.write_text(doc_example())
    out = cli("simulator", "--schedule", str(path), "--json")
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["algo"] == "by-hand"


BAD_SCHEDULES = [
    ("not json", lambda d: "{", "not valid JSON"),
    ("schema", lambda d: {**d, "schema_version": 9}, "schema_version"),
    ("missing", lambda d: {k: v for k, v in d.items() if k != "dtype"}, "'dtype'"),
    ("unknown link", lambda d: _edit(d, 2, path=["s1", "s0"]), "transfer 2: path uses s1-s0"),
    ("bad dep", lambda d: _edit(d, 3, deps=[7]), "transfer 3"),
    ("outside buffer", lambda d: _edit(d, 0, offset=5), "transfer 0: elements"),
    ("wrong sum", lambda d: {**d, "transfers": d["transfers"][:3]}, "transfer"),
]


def _edit(doc: dict, index: int, **changes) -> dict:
    transfers = [dict(t) for t in doc["transfers"]]
    transfers[index].update(changes)
    return {**doc, "transfers": transfers}


@pytest.mark.parametrize("name,change,fragment", BAD_SCHEDULES,
                         ids=[b[0] for b in BAD_SCHEDULES])
def test_bad_schedule_files_are_one_line(tmp_path, name, change, fragment):
    changed = change(json.loads(doc_example()))
    path = tmp_path / "bad.json"
    path.write_text(changed if isinstance(changed, str) else json.dumps(changed))
    for module, extra in (("simulator", ()), ("emulation.run", ("--topo", "bcube", "--n", "2",
                                                                "--k", "0"))):
        out = cli(module, "--schedule", str(path), *extra)
        assert out.returncode == 2, (module, out.stderr)
        lines = out.stderr.strip().splitlines()
        assert len(lines) == 1 and fragment in lines[0], (module, lines)


def test_a_schedule_for_another_topology_is_refused(tmp_path):
    path = tmp_path / "s.json"
    path.write_text(doc_example())
    out = cli("simulator", "--schedule", str(path), "--topo", "bcube", "--n", "3")
    assert out.returncode == 2 and "schedule was made for" in out.stderr


def test_module_function_plugin_and_bad_plugins(tmp_path):
    (tmp_path / "myplug.py").write_text(
        "from traffic.collectives import build\n"
        "def ring(graph, size_bytes, dtype):\n"
        "    return build('ring', graph, size_bytes, dtype)\n"
        "def nothing(graph, size_bytes, dtype):\n"
        "    return 42\n"
        "def broken(graph, size_bytes, dtype):\n"
        "    s = build('ring', graph, size_bytes, dtype)\n"
        "    return s.to_json().replace('\"reduce\"', '\"copy\"')\n")
    env = {"PYTHONPATH": f"{tmp_path}{os.pathsep}{ROOT}"}
    out = cli("simulator", "--algo", "myplug:ring", "--size-mb", "0.1", "--json", env=env)
    assert out.returncode == 0, out.stderr
    assert json.loads(out.stdout)["algo"] == "myplug:ring"
    for name, fragment in (("myplug:nothing", "returned int, not a Schedule"),
                           ("myplug:broken", "scheduler myplug:broken: transfer"),
                           ("myplug:missing", "has no 'missing'"),
                           ("nomodule:f", "cannot import 'nomodule'")):
        out = cli("simulator", "--algo", name, "--size-mb", "0.1", env=env)
        assert out.returncode == 2, (name, out.stderr)
        assert fragment in out.stderr and len(out.stderr.strip().splitlines()) == 1, out.stderr


def test_installed_plugin_is_found_by_its_entry_point(tmp_path):
    target = tmp_path / "site"
    pip = subprocess.run([sys.executable, "-m", "pip", "install", "--quiet", "--no-deps",
                          "--no-build-isolation", "--no-index", "--target", str(target),
                          str(PLUGIN)], capture_output=True, text=True, timeout=300)
    assert pip.returncode == 0, pip.stderr
    env = {"PYTHONPATH": f"{target}{os.pathsep}{ROOT}"}
    out = cli("simulator", "--algo", "star", "--topo", "bcube", "--n", "2", "--size-mb",
              "0.01", "--json", env=env)
    assert out.returncode == 0, out.stderr
    doc = json.loads(out.stdout)
    assert doc["algo"] == "star" and doc["transfers"] == 6
    listing = subprocess.run(
        [sys.executable, "-c", "from traffic.plugins import plugin_names; "
         "print(plugin_names())"], cwd=ROOT, capture_output=True, text=True, env={
            **os.environ, **env})
    assert "star" in listing.stdout
    # Without the installed distribution the name is unknown.
    out = cli("simulator", "--algo", "star")
    assert out.returncode == 2 and "unknown scheduler 'star'" in out.stderr


def test_resolve_builtin_names():
    graph = tp.make_graph("bcube", n=2, k=1)
    schedule = make_schedule("ring", graph, 4000, "float32")
    validate(schedule, graph)
    with pytest.raises(ValueError, match="unknown scheduler"):
        resolve("fastest")
