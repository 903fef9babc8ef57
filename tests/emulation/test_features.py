"""Kernel features (pure): detecting the openvswitch and sch_netem modules with both
outcomes, choosing the datapath, refusing delay and loss without netem, and the netem lines
of the shaping commands. This machine has neither module; the Vagrant box has both."""

from __future__ import annotations

from pathlib import Path

import pytest

from emulation.features import Features, check_link_effects, choose_datapath, detect
from emulation.plan import FLOW_QUEUES, shaping_commands

NONE = Features(kernel_datapath=False, netem=False)
BOTH = Features(kernel_datapath=True, netem=True)


def fake_kernel(tmp_path: Path, loaded: set[str], loadable: set[str]):
    """A /sys/module with ``loaded`` modules and a modprobe that loads ``loadable`` ones."""
    for name in loaded:
        (tmp_path / name).mkdir()
    tried = []

    def load(name: str) -> bool:
        tried.append(name)
        if name in loadable:
            (tmp_path / name).mkdir()
            return True
        return False

    return load, tried


def test_detect_finds_loaded_and_loadable_modules(tmp_path):
    load, tried = fake_kernel(tmp_path, loaded={"openvswitch"}, loadable={"sch_netem"})
    assert detect(tmp_path, load) == BOTH
    assert tried == ["sch_netem"]  # a loaded module is not loaded again


def test_detect_without_either_module(tmp_path):
    load, tried = fake_kernel(tmp_path, loaded=set(), loadable=set())
    features = detect(tmp_path, load)
    assert features == NONE and sorted(tried) == ["openvswitch", "sch_netem"]
    assert features.to_dict() == {
        "kernel_datapath": {"available": False, "module": "openvswitch"},
        "netem": {"available": False, "module": "sch_netem"}}


def test_a_modprobe_that_succeeds_without_the_module_appearing_is_no_module(tmp_path):
    assert detect(tmp_path, lambda name: True) == NONE


def test_datapath_choice():
    assert choose_datapath("user", BOTH) == "user"
    assert choose_datapath("auto", BOTH) == "kernel"
    assert choose_datapath("auto", NONE) == "user"
    assert choose_datapath("kernel", BOTH) == "kernel"
    with pytest.raises(ValueError, match="openvswitch kernel module"):
        choose_datapath("kernel", NONE)
    with pytest.raises(ValueError, match="choose one of"):
        choose_datapath("fast", BOTH)


def test_delay_and_loss_need_netem():
    assert check_link_effects(None, None, NONE) == (0.0, 0.0)
    assert check_link_effects(5, 0.5, BOTH) == (5.0, 0.5)
    with pytest.raises(ValueError, match="--delay-ms 5: .*sch_netem"):
        check_link_effects(5, None, NONE)
    with pytest.raises(ValueError, match="--loss-pct 1: .*sch_netem"):
        check_link_effects(None, 1, NONE)
    for delay, loss in ((-1, None), (None, 100), (None, -0.1)):
        with pytest.raises(ValueError, match="must be >= 0"):
            check_link_effects(delay, loss, BOTH)


def test_shaping_adds_one_netem_per_leaf_class_only_when_asked():
    plain = shaping_commands("x-eth1", 10.0, 1500)
    assert not [line for line in plain if "netem" in line]
    lines = shaping_commands("x-eth1", 10.0, 1500, delay_ms=2.5, loss_pct=0.1)
    assert lines[:len(plain)] == plain
    netem = lines[len(plain):]
    assert len(netem) == FLOW_QUEUES + 2
    assert all(line.endswith("netem delay 2.5ms loss 0.1%") for line in netem)
    parents = [line.split(" parent ")[1].split()[0] for line in netem]
    handles = [line.split(" handle ")[1].split()[0] for line in netem]
    assert len(set(parents)) == len(set(handles)) == len(netem)
    assert {"5:1", "5:2", "5:100", f"5:{0x100 + FLOW_QUEUES - 1:x}"} <= set(parents)
    assert "5:" not in handles
    only_delay = shaping_commands("x-eth1", 10.0, 1500, delay_ms=1)
    assert only_delay[-1].endswith("netem delay 1ms")
