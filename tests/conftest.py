"""Shared test rules: gate `emulation` tests on root, Mininet and a running Open vSwitch, and
check that every emulation test leaves no namespaces, bridges, links or Mininet shells behind.

With ARTB_REQUIRE_EMULATION=1 (set by `make test` and so by CI) a missing prerequisite fails
the test instead of skipping it.
"""

from __future__ import annotations

import functools
import os
import pathlib
import shutil
import subprocess
import time

import pytest


def _run(*cmd: str) -> subprocess.CompletedProcess:
    return subprocess.run(cmd, capture_output=True, text=True, timeout=10)


@functools.cache
def emulation_unavailable() -> str | None:
    """Why emulation tests cannot run here, or None when they can."""
    fix = "run `sudo bash scripts/setup.sh`"
    if os.geteuid() != 0:
        return "emulation tests need root (sudo make test)"
    if shutil.which("mnexec") is None:
        return f"mnexec (Mininet) is not on PATH: {fix}"
    if shutil.which("ovs-vsctl") is None:
        return f"Open vSwitch is not installed: {fix}"
    try:
        if _run("ovs-vsctl", "--timeout=3", "show").returncode != 0:
            return f"ovsdb-server is not answering (ovs-vsctl --timeout=3 show): {fix}"
        if _run("ovs-appctl", "--timeout=3", "-t", "ovs-vswitchd", "version").returncode != 0:
            return f"ovs-vswitchd is not answering: {fix}"
    except subprocess.TimeoutExpired:
        return f"Open vSwitch is not answering: {fix}"
    return None


def pytest_runtest_setup(item: pytest.Item) -> None:
    if item.get_closest_marker("emulation") is None:
        return
    reason = emulation_unavailable()
    if reason is None:
        return
    if os.environ.get("ARTB_REQUIRE_EMULATION") == "1":
        pytest.fail(f"ARTB_REQUIRE_EMULATION=1 but {reason}", pytrace=False)
    pytest.skip(reason)


def require_browser() -> None:
    """Skip the calling test when no Chromium is on PATH; fail it instead under
    ARTB_REQUIRE_EMULATION=1 (`make test` installs Debian's chromium for the tests)."""
    from bench.browser import BrowserMissing, find_chromium

    try:
        find_chromium()
    except BrowserMissing as exc:
        if os.environ.get("ARTB_REQUIRE_EMULATION") == "1":
            pytest.fail(f"ARTB_REQUIRE_EMULATION=1 but {exc}", pytrace=False)
        pytest.skip(str(exc))


def network_state() -> dict[str, set[str]]:
    """Names of network namespaces, OVS bridges, links and Mininet host shells that exist now."""
    links = {
        line.split(":")[1].strip().split("@")[0]
        for line in _run("ip", "-o", "link", "show").stdout.splitlines()
    }
    shells = set()
    for cmdline in pathlib.Path("/proc").glob("[0-9]*/cmdline"):
        try:
            argv = cmdline.read_bytes().split(b"\0")
        except OSError:
            continue
        if any(arg.startswith(b"mininet:") for arg in argv):
            shells.add(f"pid {cmdline.parent.name}: {b' '.join(argv).decode(errors='replace')}")
    return {
        "netns": {line.split()[0] for line in _run("ip", "netns", "list").stdout.splitlines()},
        "bridges": set(_run("ovs-vsctl", "--timeout=5", "list-br").stdout.split()),
        "links": links,
        "mininet shells": shells,
    }


def new_leftovers(before: dict[str, set[str]]) -> dict[str, set[str]]:
    """What exists now that did not in `before`; waits up to 3 s for teardown to settle."""
    deadline = time.monotonic() + 3
    while True:
        after = network_state()
        extra = {kind: after[kind] - names for kind, names in before.items() if after[kind] - names}
        if not extra or time.monotonic() > deadline:
            return extra
        time.sleep(0.2)


@pytest.fixture(autouse=True)
def emulation_leftovers(request: pytest.FixtureRequest):
    """For `emulation` tests: fail if the test leaves anything behind (diff against before)."""
    if request.node.get_closest_marker("emulation") is None:
        yield
        return
    before = network_state()
    yield
    extra = new_leftovers(before)
    assert not extra, f"emulation test left behind: {extra}"
