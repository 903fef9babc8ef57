"""The run's table (pure): rows over the OVS load budget are marked and footnoted."""

from emulation.report import calibration_note, marks, table


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
    assert lines[4].endswith("use --bw-mbps 4.1")  # 10 x 400 / 960 = 4.17, rounded down


def test_rows_over_the_transfer_budget_are_marked_too():
    rows = [_row("ring", 300.0) | {"offered_transfers_per_s": 500.0},
            _row("multitree", 300.0) | {"offered_transfers_per_s": 8000.0},
            _row("drl", 960.0) | {"offered_transfers_per_s": 100.0}]
    text = table(rows, load_budget_mbps=400.0, bw_mbps=10.0, transfer_budget=2000.0)
    lines = text.splitlines()
    assert "*" not in lines[2] and "+20.0*" in lines[3] and "+20.0*" in lines[4]
    assert "~400 Mbit/s" in lines[5] and "~2000 the hosts' workers" in lines[5]
    # the tighter of the two: 10 x 2000 / 8000 = 2.5
    assert lines[5].endswith("use --bw-mbps 2.5")
    assert "*" not in table(rows[:1], 400.0, 10.0, transfer_budget=2000.0)
    marked, [note] = marks(rows, None, 10.0, transfer_budget=2000.0)
    assert marked == ["multitree"] and "Mbit/s budget" not in note
    assert note.endswith("use --bw-mbps 2.5")


def test_no_footnote_within_the_budget_or_without_one():
    rows = [_row("ring", 300.0), _row("drl", 960.0)]
    assert "*" not in table(rows)
    assert "*" not in table(rows[:1], load_budget_mbps=400.0, bw_mbps=10.0)
    assert len(table(rows[:1], load_budget_mbps=400.0).splitlines()) == 3


def test_a_footnote_names_the_calibration_factors():
    calibration = {"goodput_ratio": 0.987, "startup_s": 0.0023, "frame_bytes": 9014,
                   "failover_s": 1.16}
    [note] = calibration_note(calibration)
    assert "0.987 of their rate" in note and "2.3 ms per transfer" in note
    assert "9014-byte frames" in note and "raw err %" in note
    assert "per link" not in note and "failing" not in note
    [more] = calibration_note(calibration | {"frame_bytes": 0}, 0.005, failures=True)
    assert "frames" not in more and "5 ms per link crossed" in more and "1.16 s" in more
    assert calibration_note(None) == []
    text = table([_row("ring", 300.0)], notes=[note])
    assert text.splitlines()[-1] == note
    assert len(table([_row("ring", 300.0)]).splitlines()) == 3  # no notes, no line


def test_the_plots_draw_every_transfer_of_both_sources(tmp_path, monkeypatch):
    import json
    from pathlib import Path

    import matplotlib.colors
    import matplotlib.pyplot as plt

    from emulation.report import plot

    doc = json.loads((Path(__file__).parents[1] / "simulator" / "data"
                      / "bcube21-emulated.json").read_text())
    drawn = []
    close = plt.close
    monkeypatch.setattr(plt, "close", lambda fig: (drawn.append(fig), close(fig)))
    files = plot(tmp_path, doc["schedulers"], doc["name"])
    assert [f.name for f in files] == ["makespan.png"] + [
        f"timeline-{r['scheduler']}.png" for r in doc["schedulers"]]
    assert all(f.stat().st_size > 1000 for f in files)
    for fig, row in zip(drawn[1:], doc["schedulers"]):
        (segments,) = fig.axes[0].collections
        ends = [tuple(map(tuple, s)) for s in segments.get_segments()]
        ids = sorted(int(k) for k in row["emulated"]["start_s"])
        assert len(ends) == 2 * len(ids) == 2 * row["transfers"]
        sim, emu = row["simulated"], row["emulated"]
        first = str(ids[0])
        assert ends[0] == ((sim["start_s"][first], -0.15), (sim["finish_s"][first], -0.15))
        assert ends[1] == ((emu["start_s"][first], 0.15), (emu["finish_s"][first], 0.15))
        colours = [tuple(c) for c in segments.get_colors()]
        assert colours[0::2] == [colours[0]] * len(ids) != colours[1::2] == [colours[1]] * len(ids)
        assert colours[0] == matplotlib.colors.to_rgba("#4c78a8")  # simulated: blue
        left, right = fig.axes[0].get_xlim()
        assert left <= 0.0 and right >= max(max(sim["finish_s"].values()),
                                            max(emu["finish_s"].values()))
        assert fig.axes[0].get_ylim()[1] >= len(ids) - 1
