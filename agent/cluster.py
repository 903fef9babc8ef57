"""Starting and stopping Ray for the project's distributed work (``agent.train --workers N``
and ``python -m bench.sweep``): a small local Ray, or a connection to a cluster.

Ray is imported when one of these runs, not with this module (nor torch: a sweep uses
this without the agent); without it they raise a one-line ValueError that says how to
install it.
"""

from __future__ import annotations

import logging
from collections.abc import Iterator
from contextlib import contextmanager

INSTALL_HINT = "Ray is not installed: pip install '.[ray]' (or scripts/setup.sh)"
#: Object store of a local Ray: it carries weights, rollouts and sweep rows (a few MB).
OBJECT_STORE_BYTES = 128 * 2**20


def import_ray():
    """The ray module; ValueError with the install hint when it is missing."""
    try:
        import ray
    except ImportError:
        raise ValueError(INSTALL_HINT) from None
    return ray


def start_ray(address: str | None, num_cpus: int,
              resources: dict[str, float] | None = None) -> None:
    """Connect to the Ray cluster at ``address`` or, when None, start a new local Ray with
    ``num_cpus`` CPUs and the custom ``resources`` (e.g. ``{"emulation": 1}``),
    memory-conscious: no dashboard, a 128 MiB object store, the workers' output not
    forwarded here, Ray's messages errors only, workers not niced. ValueError when ray is
    missing or the cluster cannot be reached."""
    if num_cpus < 1:
        raise ValueError(f"num_cpus must be >= 1, got {num_cpus}")
    ray = import_ray()
    quiet = dict(log_to_driver=False, logging_level=logging.ERROR)
    if address is None:
        # "local": a new instance even when RAY_ADDRESS or /tmp/ray names another one.
        # Workers at the driver's priority: Ray's default niceness (15) lets any other job
        # on the machine starve them while the driver waits.
        ray.init(address="local", num_cpus=num_cpus, resources=resources or {},
                 include_dashboard=False, object_store_memory=OBJECT_STORE_BYTES,
                 _system_config={"worker_niceness": 0}, **quiet)
        return
    try:
        ray.init(address=address, **quiet)
    except (ConnectionError, RuntimeError) as exc:
        raise ValueError(f"cannot connect to Ray at {address}: {exc}") from None


def stop_ray() -> None:
    """Stop the local Ray started by ``start_ray`` (or disconnect from the cluster); does
    nothing when Ray is not running or not installed."""
    try:
        ray = import_ray()
    except ValueError:
        return
    if ray.is_initialized():
        ray.shutdown()


@contextmanager
def ray_session(address: str | None, num_cpus: int,
                resources: dict[str, float] | None = None) -> Iterator[None]:
    """``start_ray`` on entry and ``stop_ray`` on exit, also on errors and Ctrl-C; a Ray
    this process already runs is used as it is and left running."""
    ray = import_ray()
    if ray.is_initialized():
        yield
        return
    start_ray(address, num_cpus, resources)
    try:
        yield
    finally:
        stop_ray()
