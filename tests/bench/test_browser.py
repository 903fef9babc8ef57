"""bench.browser in a real headless Chromium: readiness, errors, probe, screenshot, cleanup.

Each browser test checks that nothing of the Chromium it started is left: the process group is
empty, no process names its temporary dir and the dir is gone. Without a browser on PATH the
browser tests skip; with ARTB_REQUIRE_EMULATION=1 (set by `make test` and CI) they fail.
"""

from __future__ import annotations

import os
import struct
import subprocess
import sys
import time
from pathlib import Path

import pytest
from conftest import require_browser

from bench import browser
from bench.browser import BrowserMissing, check_page, find_chromium

REPO = Path(__file__).resolve().parents[2]

GOOD_PAGE = """<!doctype html><html><body><p>one</p><p>two</p><p>three</p>
<script>setTimeout(() => { window.done = true; }, 200);</script></body></html>"""


@pytest.fixture
def launches(monkeypatch: pytest.MonkeyPatch) -> list[tuple[subprocess.Popen, Path]]:
    """Need a browser (skip, or fail under ARTB_REQUIRE_EMULATION=1); record each launch."""
    require_browser()
    recorded = []
    real_launch = browser._launch

    def recording_launch(browser_path: str, profile: Path, *args, **kwargs):
        proc = real_launch(browser_path, profile, *args, **kwargs)
        recorded.append((proc, profile.parent))
        return proc

    monkeypatch.setattr(browser, "_launch", recording_launch)
    return recorded


def assert_nothing_left(launches: list[tuple[subprocess.Popen, Path]]) -> None:
    """Exactly one Chromium was started and its group, processes and temp dir are gone."""
    assert len(launches) == 1
    proc, tmp = launches[0]
    assert proc.returncode is not None, "the Chromium leader was not reaped"
    with pytest.raises(ProcessLookupError):
        os.killpg(proc.pid, 0)  # start_new_session: the leader's PID is the group ID
    marker = str(tmp).encode()
    named = []
    for cmdline in Path("/proc").glob("[0-9]*/cmdline"):
        try:
            if marker in cmdline.read_bytes():
                named.append(cmdline.parent.name)
        except OSError:
            continue
    assert not named, f"processes still name {tmp}: {named}"
    assert not tmp.exists()


def write(tmp_path: Path, body: str, name: str = "page.html") -> Path:
    page = tmp_path / name
    page.write_text(body)
    return page


def test_good_page_becomes_ready_with_probe_value_and_no_errors(tmp_path, launches):
    check = check_page(write(tmp_path, GOOD_PAGE), "window.done === true",
                       probe_js="document.querySelectorAll('p').length")
    assert check.ready
    assert check.ready_s >= 0.2
    assert 0 < check.load_s <= check.ready_s
    assert check.value == 3
    assert check.console_errors == []
    assert check.screenshot is None
    assert_nothing_left(launches)


def test_console_error_is_reported(tmp_path, launches):
    page = write(tmp_path, "<!doctype html><p>x</p><script>console.error('boom');</script>")
    check = check_page(page, "document.readyState === 'complete'")
    assert check.ready
    assert any("boom" in error for error in check.console_errors), check.console_errors
    assert_nothing_left(launches)


def test_uncaught_exception_is_reported(tmp_path, launches):
    page = write(tmp_path, "<!doctype html><p>x</p><script>throw new Error('kaboom');</script>")
    check = check_page(page, "document.readyState === 'complete'")
    assert check.ready
    assert any("kaboom" in error for error in check.console_errors), check.console_errors
    assert_nothing_left(launches)


@pytest.mark.slow
def test_never_ready_page_gives_up_at_the_timeout(tmp_path, launches):
    started = time.monotonic()
    check = check_page(write(tmp_path, GOOD_PAGE), "window.never === true", timeout_s=3,
                       probe_js="1")
    wall_s = time.monotonic() - started
    assert not check.ready
    assert 2.5 <= check.ready_s <= 4.0
    assert check.value is None  # the probe runs only once ready
    assert check.console_errors == []
    assert wall_s < 3 + browser.LAUNCH_TIMEOUT_S
    assert_nothing_left(launches)


def test_screenshot_is_a_png_of_the_viewport(tmp_path, launches):
    shot = tmp_path / "shots" / "page.png"
    check = check_page(write(tmp_path, GOOD_PAGE), "window.done === true", screenshot=shot,
                       width=640, height=480)
    assert check.screenshot == shot
    data = shot.read_bytes()
    assert data.startswith(b"\x89PNG\r\n\x1a\n")
    width, height = struct.unpack(">II", data[16:24])  # IHDR: the first chunk
    assert (width, height) == (640, 480)
    assert_nothing_left(launches)


def test_browser_is_cleaned_up_when_interrupted(tmp_path, launches, monkeypatch):
    def interrupted(*args, **kwargs):
        raise KeyboardInterrupt

    monkeypatch.setattr(browser, "_drive", interrupted)
    with pytest.raises(KeyboardInterrupt):
        check_page(write(tmp_path, GOOD_PAGE), "true")
    assert_nothing_left(launches)


def test_missing_page_is_an_error_before_any_launch(tmp_path):
    with pytest.raises(FileNotFoundError, match="no-such.html"):
        check_page(tmp_path / "no-such.html", "true")


def test_find_chromium_names_the_debian_package_when_missing(tmp_path, monkeypatch):
    monkeypatch.setenv("PATH", str(tmp_path))
    with pytest.raises(BrowserMissing, match="`chromium`") as raised:
        find_chromium()
    assert isinstance(raised.value, RuntimeError)
    assert "\n" not in str(raised.value)


def run_cli(*args: str, env: dict | None = None) -> subprocess.CompletedProcess:
    return subprocess.run([sys.executable, "-m", "bench.browser", *args], cwd=REPO, env=env,
                          capture_output=True, text=True, timeout=120)


def test_cli_reports_a_ready_page(tmp_path, launches):
    page = write(tmp_path, GOOD_PAGE)
    done = run_cli(str(page), "--ready", "window.done", "--probe", "document.title.length")
    assert done.returncode == 0, done.stdout + done.stderr
    assert "ready_s" in done.stdout and "errors  0" in done.stdout


def test_cli_exits_2_with_one_line_on_missing_page_or_browser(tmp_path):
    missing = run_cli(str(tmp_path / "no-such.html"))
    assert missing.returncode == 2
    assert missing.stderr.strip().count("\n") == 0 and "no-such.html" in missing.stderr
    page = write(tmp_path, GOOD_PAGE)
    no_browser = run_cli(str(page), env={**os.environ, "PATH": str(tmp_path)})
    assert no_browser.returncode == 2
    assert no_browser.stderr.strip().count("\n") == 0 and "chromium" in no_browser.stderr
