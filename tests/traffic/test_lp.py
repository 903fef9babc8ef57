"""``traffic.lp``: HiGHS models that print nothing, not even the banner of a process's
first model (which would break the commands' ``--json`` output)."""

import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_the_first_model_of_a_process_prints_nothing():
    code = ("from traffic.lp import model, solved\n"
            "lp = model()\n"
            "lp.addVar(0.0, 1.0)\n"
            "assert solved(lp)\n"
            "print('done')\n")
    out = subprocess.run([sys.executable, "-c", code], cwd=ROOT, capture_output=True,
                         text=True, timeout=60)
    assert out.returncode == 0, out.stderr
    assert out.stdout == "done\n"
    assert "HiGHS" not in out.stderr


def test_infeasible_is_not_solved():
    from traffic.lp import model, outcome, solved

    lp = model()
    lp.addVar(1.0, 2.0)
    lp.addRow(-1.0, 0.5, 1, [0], [1.0])  # x <= 0.5 with x >= 1
    assert not solved(lp)
    assert outcome(lp) == "Infeasible"
