"""The cost model: validated, reusable from an emulation run's results.json."""

import json

import pytest

from simulator import BANDWIDTH_ONLY, CALIBRATED, CostModel


def test_defaults_and_kwargs():
    assert BANDWIDTH_ONLY.kwargs() == {"startup_s": 0.0, "hop_latency_s": 0.0, "goodput": 1.0,
                                       "failover_s": 0.0, "frame_bytes": 0.0}
    assert CALIBRATED.startup_s > 0 and 0 < CALIBRATED.goodput < 1


@pytest.mark.parametrize("kwargs,match", [({"startup_s": -1}, "startup_s"),
                                          ({"goodput": 0}, "goodput"),
                                          ({"goodput": 1.5}, "goodput"),
                                          ({"frame_bytes": -1}, "frame_bytes")])
def test_bad_values_are_refused(kwargs, match):
    with pytest.raises(ValueError, match=match):
        CostModel(**kwargs)


def test_from_results_reads_the_calibration(tmp_path):
    doc = {"calibration": {"goodput_ratio": 0.97, "startup_s": 0.003}}
    (tmp_path / "results.json").write_text(json.dumps(doc))
    assert CostModel.from_results(tmp_path) == CostModel(0.003, 0.0, 0.97)
    doc["calibration"]["frame_bytes"] = 9014
    (tmp_path / "results.json").write_text(json.dumps(doc))
    assert CostModel.from_results(tmp_path).frame_bytes == 9014
    (tmp_path / "results.json").write_text(json.dumps({"calibration": None}))
    with pytest.raises(ValueError, match="no calibration"):
        CostModel.from_results(tmp_path / "results.json")
    with pytest.raises(ValueError, match="cannot read"):
        CostModel.from_results(tmp_path / "missing.json")
