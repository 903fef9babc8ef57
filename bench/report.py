"""``python -m bench.report [DIR] [--screenshot F]``: how big a run's report page is and how
fast headless Chromium opens it, against the goals (under 3 MB, open in under 2 s).

DIR is a run directory of ``python -m emulation.run`` (default: the newest ``runs/bcube-*``,
the default demo's); its report.html is opened as written, or built from its results.json
when missing. The page counts as open when every chart is drawn. The probe also checks what
the page shows: the scheduler selector's options, the table's rows, one line per link on the
map, the busiest-links and per-server charts, and that choosing another scheduler redraws
the map. Exit status 1 when the page logs an error or never finishes drawing.
"""

from __future__ import annotations

import argparse
import json
import sys
from pathlib import Path

#: True once vega-embed has drawn every chart of the page (the page sets it).
READY_JS = 'document.body.dataset.ready === "1"'
#: What the page shows, and whether choosing the next scheduler redraws the map's links.
PROBE_JS = """(async () => {
  const all = (s) => [...document.querySelectorAll(s)];
  const marks = (name) => all(`#charts g[class~="role-mark"][class*="${name}"] > *`);
  const colours = () => marks("map_links").map(e => e.getAttribute("stroke")).join();
  const select = document.querySelector("#controls select");
  const found = {
    options: [...select.options].map(o => o.value),
    radios: all("#controls input[type=radio]").map(e => e.value),
    table_rows: all("#runs tr").length - 1,
    map_links: marks("map_links").length, map_nodes: marks("map_nodes").length,
    makespans: marks("makespans").length, busiest: marks("busiest_child").length,
    sends: marks("server_sends_child").length,
    receives: marks("server_receives_child").length,
    command: document.querySelector("#command").textContent,
  };
  const before = colours();
  if (select.options.length > 1) {
    select.value = select.options[1].value;
    select.dispatchEvent(new Event("change"));
    await new Promise(r => setTimeout(r, 300));
  }
  found.redrawn = before !== colours();
  return found;
})()"""
#: Goals of the default demo's page.
MAX_MB = 3.0
MAX_OPEN_S = 2.0


def newest_run(root: Path = Path("runs")) -> Path:
    """The newest ``runs/bcube-*`` directory with a results.json; ValueError when none."""
    runs = sorted((p for p in root.glob("bcube-*") if (p / "results.json").exists()),
                  key=lambda p: (p / "results.json").stat().st_mtime)
    if not runs:
        raise ValueError(f"no run in {root}/bcube-*: run `sudo make demo` first")
    return runs[-1]


def main(argv: list[str] | None = None) -> int:
    """Entry point of ``python -m bench.report``."""
    from bench.browser import BrowserMissing, check_page
    from simulator.page import read, write

    parser = argparse.ArgumentParser(prog="python -m bench.report", description=__doc__
                                     .split("\n\n")[0])
    parser.add_argument("dir", nargs="?", type=Path, help="run directory (default: newest "
                        "runs/bcube-*)")
    parser.add_argument("--screenshot", type=Path, help="save a full-page PNG here")
    args = parser.parse_args(argv)
    try:
        run = args.dir or newest_run()
        page = run / "report.html"
        if not page.exists():
            write(read(run), page)
        check = check_page(page, READY_JS, probe_js=PROBE_JS, screenshot=args.screenshot)
    except (ValueError, BrowserMissing, FileNotFoundError) as exc:
        sys.stderr.write(f"python -m bench.report: error: {exc}\n")
        return 2
    mb = page.stat().st_size / 1e6
    print(f"page      {page}")
    print(f"size      {mb:.2f} MB (goal < {MAX_MB:g} MB: {'met' if mb < MAX_MB else 'MISSED'})")
    print(f"load      {check.load_s:.3f} s")
    opened = check.ready_s if check.ready else float("inf")
    print(f"drawn     {opened:.3f} s after navigation (goal < {MAX_OPEN_S:g} s: "
          f"{'met' if opened < MAX_OPEN_S else 'MISSED'})")
    print(f"shows     {json.dumps(check.value)}")
    print(f"errors    {len(check.console_errors)}")
    for error in check.console_errors:
        print(f"  {error}")
    if check.screenshot:
        print(f"screenshot {check.screenshot}")
    return 0 if check.ready and not check.console_errors else 1


if __name__ == "__main__":
    raise SystemExit(main())
