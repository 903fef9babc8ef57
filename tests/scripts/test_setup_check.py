"""scripts/setup.sh --check: its items run at once, yet report one line each, in order, and
the exit status says whether a required one is missing."""

from __future__ import annotations

import os
import subprocess
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_check_reports_every_item_in_order_and_fails_on_a_missing_venv(tmp_path):
    env = dict(os.environ, VENV=str(tmp_path / "no-venv"), ARTB_TEST_TOOLS="0",
               TMPDIR=str(tmp_path))
    run = subprocess.run(["bash", str(ROOT / "scripts" / "setup.sh"), "--check"],
                         capture_output=True, text=True, env=env, timeout=120)
    lines = run.stdout.splitlines()
    assert run.returncode == 1, run.stdout + run.stderr
    names = [line.split(":", 1)[1].split(" -> ")[0].strip() for line in lines]
    assert names[:2] == ["root", "Open vSwitch answering (ovsdb-server and ovs-vswitchd)"]
    assert names[-1].startswith("'sudo python' runs")
    by_name = dict(zip(names, lines, strict=True))
    # every Python item needs the venv: missing, with its fix and the failure's last line
    venv_items = [n for n in names if "importable" in n or "numba" in n or "installed" in n]
    assert len(venv_items) == 6
    for name in venv_items:
        assert by_name[name].startswith(f"MISSING: {name} -> run: bash scripts/setup.sh")
        assert "no-venv/bin/python" in by_name[name]
    assert by_name[names[-1]].startswith("WARNING: ")  # optional: warns, never fails
    assert not list(tmp_path.iterdir())  # the items' files are removed
