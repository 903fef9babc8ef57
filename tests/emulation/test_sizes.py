"""The emulation and the simulator move the same bytes for the same ``--size-mb``."""

from __future__ import annotations

from emulation.run import parse_args, prepare
from traffic.schedule import buffer_bytes


def test_emulation_plans_the_buffer_the_simulator_simulates():
    # 4.1 MB of float64: truncating 4.1 * 1e6 (= 4099999.99...) gave 4 099 992 bytes here,
    # one element less than the simulator's 4 100 000.
    args = parse_args(["--topo", "bcube", "--n", "2", "--k", "1", "--scheduler", "ring",
                       "--size-mb", "4.1", "--dtype", "float64", "--bw-mbps", "10"])
    _, size_bytes, plans = prepare(args)
    assert size_bytes == buffer_bytes(4.1, "float64") == 4_100_000
    (plan,) = plans
    assert plan["schedule"].size_bytes == size_bytes
