"""The report page in a real headless Chromium: drawn without console errors, with the
expected elements, a working scheduler selector and a screenshot (compared structurally).

Without a browser on PATH these tests skip; with ARTB_REQUIRE_EMULATION=1 (set by `make test`
and CI, whose setup installs Debian's chromium) they fail.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
from conftest import require_browser

from bench.browser import check_page
from bench.report import PROBE_JS, READY_JS
from simulator import page

STORED = Path(__file__).parent / "data" / "bcube21-emulated.json"


@pytest.fixture(autouse=True)
def chromium() -> None:
    require_browser()


def test_the_emulated_runs_page_draws_everything(tmp_path):
    doc = json.loads(STORED.read_text())
    html = page.write(doc, tmp_path / "report.html")
    shot = tmp_path / "report.png"
    check = check_page(html, READY_JS, probe_js=PROBE_JS, screenshot=shot)
    assert check.ready and check.console_errors == []
    shows = check.value
    names = [row["scheduler"] for row in doc["schedulers"]]
    assert shows["options"] == names
    assert shows["radios"] == ["emulated", "simulated"]
    assert shows["table_rows"] == len(names)
    assert shows["map_links"] == len(doc["network"]["links"])
    assert shows["map_nodes"] == len(doc["network"]["nodes"])
    assert shows["makespans"] == 2 * len(names)  # simulated and emulated bars
    assert shows["busiest"] > 0 and shows["sends"] > 0 and shows["receives"] > 0
    assert shows["command"] == doc["command"]
    assert shows["redrawn"]  # the selector redraws the map for the other scheduler
    # the screenshot: a full-page PNG, not blank
    import matplotlib.image

    pixels = matplotlib.image.imread(shot)
    assert pixels.shape[1] >= 1300 and pixels.shape[0] > 1000
    assert pixels[..., :3].std() > 0.05


def test_a_simulated_only_page_offers_only_simulated_load(tmp_path):
    doc = json.loads(STORED.read_text())
    doc["source"] = "simulator"
    for row in doc["schedulers"]:
        for key in ("emulated", "emulated_links", "emulated_s", "error_pct", "error_raw_pct"):
            row.pop(key, None)
    html = page.write(doc, tmp_path / "report.html")
    check = check_page(html, READY_JS, probe_js=PROBE_JS)
    assert check.ready and check.console_errors == []
    assert check.value["radios"] == ["simulated"]
    assert check.value["makespans"] == len(doc["schedulers"])
    assert check.value["map_links"] == len(doc["network"]["links"])
