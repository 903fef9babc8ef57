"""Which kernel features the emulation can use on this host: the Open vSwitch kernel datapath
(module ``openvswitch``) and link delay and loss (module ``sch_netem``). No Mininet here.

Detection loads a module that is present but not loaded (``modprobe``, as root) and then
looks for it under ``/sys/module``; both are parameters so tests can fake either outcome.
"""

from __future__ import annotations

import subprocess
from collections.abc import Callable
from dataclasses import asdict, dataclass
from pathlib import Path

#: The kernel modules, by feature.
MODULES = {"kernel_datapath": "openvswitch", "netem": "sch_netem"}
#: ``--datapath`` choices: the tested userspace datapath, the kernel's, or the kernel's where
#: its module loads.
DATAPATHS = ("user", "kernel", "auto")


def modprobe(name: str) -> bool:
    """Try to load kernel module ``name`` quietly; whether modprobe succeeded."""
    try:
        return subprocess.run(["modprobe", "-q", name], capture_output=True,
                              timeout=20).returncode == 0
    except (OSError, subprocess.SubprocessError):
        return False


def module_available(name: str, sys_module: Path = Path("/sys/module"),
                     load: Callable[[str], bool] = modprobe) -> bool:
    """Whether kernel module ``name`` is loaded, after trying to load it."""
    if (sys_module / name).exists():
        return True
    return load(name) and (sys_module / name).exists()


@dataclass(frozen=True)
class Features:
    """What this host's kernel offers the emulation."""

    kernel_datapath: bool
    netem: bool

    def to_dict(self) -> dict:
        """JSON-ready: each feature and its module."""
        return {feature: {"available": available, "module": MODULES[feature]}
                for feature, available in asdict(self).items()}


def detect(sys_module: Path = Path("/sys/module"),
           load: Callable[[str], bool] = modprobe) -> Features:
    """The features of this host (loading their modules where present)."""
    return Features(**{feature: module_available(module, sys_module, load)
                       for feature, module in MODULES.items()})


def choose_datapath(asked: str, features: Features) -> str:
    """Mininet's datapath name (``user`` or ``kernel``) for ``--datapath asked``;
    ValueError naming the missing module when ``kernel`` is asked for and absent.

    >>> choose_datapath("auto", Features(kernel_datapath=False, netem=False))
    'user'
    >>> choose_datapath("auto", Features(kernel_datapath=True, netem=False))
    'kernel'
    """
    if asked not in DATAPATHS:
        raise ValueError(f"--datapath {asked!r}: choose one of {', '.join(DATAPATHS)}")
    if asked == "user":
        return "user"
    if features.kernel_datapath:
        return "kernel"
    if asked == "kernel":
        raise ValueError("--datapath kernel needs the openvswitch kernel module, which this "
                         "kernel does not have (modprobe openvswitch failed)")
    return "user"


def check_link_effects(delay_ms: float | None, loss_pct: float | None,
                       features: Features) -> tuple[float, float]:
    """The link delay (ms) and loss (%) to emulate, 0 when not asked for; ValueError naming
    the bad value, or the missing sch_netem module when either is asked for without it."""
    delay = 0.0 if delay_ms is None else float(delay_ms)
    loss = 0.0 if loss_pct is None else float(loss_pct)
    if not (0.0 <= delay < float("inf")):
        raise ValueError(f"--delay-ms must be >= 0, got {delay_ms!r}")
    if not 0.0 <= loss < 100.0:
        raise ValueError(f"--loss-pct must be >= 0 and < 100, got {loss_pct!r}")
    if (delay or loss) and not features.netem:
        flag = f"--delay-ms {delay:g}" if delay else f"--loss-pct {loss:g}"
        raise ValueError(f"{flag}: link delay and loss need the sch_netem kernel module, "
                         "which this kernel does not have (modprobe sch_netem failed); only "
                         "bandwidth (HTB) is shaped here")
    return delay, loss
