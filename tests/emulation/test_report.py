"""The run's table (pure): rows over the OVS load budget are marked and footnoted."""

from emulation.report import table


def _row(name: str, load: float) -> dict:
    return {"scheduler": name, "simulated_s": 1.0, "emulated_s": 1.2, "error_pct": 20.0,
            "error_raw_pct": 25.0, "verified": True, "offered_load_mbps": load}


def test_rows_over_the_load_budget_are_marked_with_a_rate_to_use():
    text = table([_row("ring", 300.0), _row("drl", 960.0)], load_budget_mbps=400.0,
                 bw_mbps=10.0)
    lines = text.splitlines()
    assert "+20.0 " in lines[2] and "*" not in lines[2]
    assert "+20.0*" in lines[3]
    assert lines[4].startswith("* offered load above the ~400 Mbit/s")
    assert lines[4].endswith("run with --bw-mbps 4.1")  # 10 x 400 / 960 = 4.17, rounded down


def test_no_footnote_within_the_budget_or_without_one():
    rows = [_row("ring", 300.0), _row("drl", 960.0)]
    assert "*" not in table(rows)
    assert "*" not in table(rows[:1], load_budget_mbps=400.0, bw_mbps=10.0)
    assert len(table(rows[:1], load_budget_mbps=400.0).splitlines()) == 3


def test_a_footnote_names_the_calibration_factors():
    calibration = {"goodput_ratio": 0.987, "startup_s": 0.0023, "frame_bytes": 9014}
    text = table([_row("ring", 300.0)], calibration=calibration)
    last = text.splitlines()[-1]
    assert "0.987 of their rate" in last and "2.3 ms per transfer" in last
    assert "9014-byte frames" in last and "raw err %" in last
    assert len(table([_row("ring", 300.0)]).splitlines()) == 3  # no calibration, no note
