"""Load a local HTML page in headless Chromium and report load time, readiness and errors.

``python -m bench.browser PAGE.html [--ready JS] [--probe JS] [--screenshot F] [--timeout S]``
prints load_s, ready_s, the probe value and every console error; it exits 0 when the page
became ready without errors, 1 when it did not or logged errors, 2 (one-line message) when the
page or the browser is missing.

`check_page` starts a fresh Chromium (its own process group and throw-away profile), drives it
over the DevTools protocol on 127.0.0.1 with ``websocket-client`` and always tears it down:
websocket closed, process group and crash handlers terminated (killed if they linger),
profile removed. Needs the Debian package ``chromium`` (or Chrome / chromium-browser) on PATH.
"""

from __future__ import annotations

import argparse
import base64
import contextlib
import json
import math
import os
import shutil
import signal
import subprocess
import sys
import tempfile
import time
import urllib.request
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from traffic.runner import time_scale

try:
    import websocket
except ImportError as exc:  # pragma: no cover - depends on the environment
    raise ImportError(
        "bench.browser needs websocket-client: `.venv/bin/pip install websocket-client`"
    ) from exc

#: Executable names tried on PATH, in order.
BROWSER_NAMES = ("chromium", "chromium-browser", "google-chrome")
#: How long Chromium may take to write DevToolsActivePort (times ARTB_TIME_SCALE,
#: ``traffic.runner.time_scale``, as the two limits below).
LAUNCH_TIMEOUT_S = 60.0 * time_scale()
#: Limit for each step after the ready wait (probe, layout metrics, screenshot).
STEP_TIMEOUT_S = 15.0 * time_scale()
#: Default limit of the load and ready wait.
PAGE_TIMEOUT_S = 30.0 * time_scale()
#: Pause between two evaluations of ready_js.
POLL_S = 0.05
#: Console API call types reported as errors.
ERROR_CONSOLE_TYPES = ("error", "assert")


class BrowserMissing(RuntimeError):
    """No Chromium or Chrome executable on PATH."""


class BrowserError(RuntimeError):
    """Chromium did not start, or a DevTools call failed or timed out."""


@dataclass
class PageCheck:
    """What `check_page` saw; times in seconds from just before ``Page.navigate``."""

    load_s: float  # navigation start to the load event; nan if it never fired
    ready_s: float  # navigation start to ready_js first truthy; the time waited if never
    ready: bool  # ready_js became truthy before the timeout
    value: Any  # JSON value of probe_js once ready; None without probe_js or when not ready
    console_errors: list[str] = field(default_factory=list)  # errors, in arrival order
    screenshot: Path | None = None  # the PNG written, if one was asked for


def find_chromium() -> str:
    """Return the path of the first of `BROWSER_NAMES` on PATH; raise BrowserMissing if none."""
    for name in BROWSER_NAMES:
        path = shutil.which(name)
        if path:
            return path
    raise BrowserMissing(
        f"no browser on PATH (tried {', '.join(BROWSER_NAMES)}): "
        "install the Debian package `chromium` (apt-get install chromium)"
    )


class _Cdp:
    """One DevTools websocket: numbered calls, responses matched by id, events kept in order."""

    def __init__(self, ws: websocket.WebSocket) -> None:
        self._ws = ws
        self._last_id = 0
        self._responses: dict[int, dict] = {}
        #: (arrival time.monotonic(), method, params) for every event received so far.
        self.events: list[tuple[float, str, dict]] = []

    def call(self, method: str, params: dict | None = None, *, deadline: float) -> dict:
        """Send one command and return its result; BrowserError on an error or at `deadline`."""
        self._last_id += 1
        call_id = self._last_id
        self._ws.send(json.dumps({"id": call_id, "method": method, "params": params or {}}))
        while call_id not in self._responses:
            self.pump(deadline, what=method)
        response = self._responses.pop(call_id)
        if "error" in response:
            raise BrowserError(f"{method} failed: {response['error'].get('message')}")
        return response.get("result", {})

    def pump(self, deadline: float, *, what: str) -> None:
        """Receive one message (response or event); BrowserError if `deadline` passes first."""
        remaining = deadline - time.monotonic()
        if remaining <= 0:
            raise BrowserError(f"timed out waiting for {what}")
        self._ws.settimeout(remaining)
        try:
            raw = self._ws.recv()
        except websocket.WebSocketTimeoutException:
            raise BrowserError(f"timed out waiting for {what}") from None
        except (websocket.WebSocketException, OSError) as exc:
            raise BrowserError(f"DevTools connection lost waiting for {what}: {exc}") from exc
        message = json.loads(raw)
        if "id" in message:
            self._responses[message["id"]] = message
        elif "method" in message:
            self.events.append((time.monotonic(), message["method"], message.get("params", {})))

    def wait_event(self, method: str, deadline: float, *, after: int = 0) -> float | None:
        """Arrival time of the first `method` event at index >= `after`; None at `deadline`."""
        seen = after
        while True:
            for arrived, name, _ in self.events[seen:]:
                if name == method:
                    return arrived
            seen = max(seen, len(self.events))
            try:
                self.pump(deadline, what=method)
            except BrowserError:
                if time.monotonic() >= deadline:
                    return None
                raise


def _remote_text(obj: dict) -> str:
    """Readable text of one Runtime.RemoteObject (console argument)."""
    for key in ("value", "unserializableValue", "description"):
        if key in obj:
            value = obj[key]
            return value if isinstance(value, str) else json.dumps(value)
    return obj.get("type", "?")


def _error_messages(events: list[tuple[float, str, dict]]) -> list[str]:
    """Console errors, uncaught exceptions and error-level log entries, in arrival order."""
    errors = []
    for _, method, params in events:
        if method == "Runtime.consoleAPICalled" and params.get("type") in ERROR_CONSOLE_TYPES:
            text = " ".join(_remote_text(arg) for arg in params.get("args", []))
            errors.append(f"console.{params['type']}: {text}")
        elif method == "Runtime.exceptionThrown":
            details = params.get("exceptionDetails", {})
            description = details.get("exception", {}).get("description", "")
            errors.append(f"{details.get('text', 'exception')} {description}".strip())
        elif method == "Log.entryAdded" and params.get("entry", {}).get("level") == "error":
            entry = params["entry"]
            where = f" ({entry['url']})" if entry.get("url") else ""
            errors.append(f"log.{entry.get('source', '?')}: {entry.get('text', '')}{where}")
    return errors


def _launch(browser: str, profile: Path, width: int, height: int) -> subprocess.Popen:
    """Start Chromium headless in its own process group, DevTools on an ephemeral port."""
    args = [
        browser, "--headless=new", "--no-sandbox", "--disable-gpu",
        "--remote-debugging-port=0", "--remote-allow-origins=*", f"--user-data-dir={profile}",
        "--no-first-run", "--no-default-browser-check", "--disable-background-networking",
        "--disable-component-update", "--disable-sync", "--disable-default-apps",
        "--disable-extensions", "--metrics-recording-only", "--mute-audio",
        f"--window-size={width},{height}", "about:blank",
    ]
    # Config and cache under the temporary dir: the crash handler, which daemonizes out of the
    # process group, then names that dir on its command line (see `_ours`) and writes no
    # crash database into the user's home.
    tmp = profile.parent
    env = {**os.environ, "XDG_CONFIG_HOME": str(tmp / "config"),
           "XDG_CACHE_HOME": str(tmp / "cache")}
    with open(tmp / "chromium.log", "wb") as log:
        return subprocess.Popen(args, stdin=subprocess.DEVNULL, stdout=log, stderr=log,
                                env=env, start_new_session=True)


def _page_websocket_url(proc: subprocess.Popen, profile: Path) -> str:
    """webSocketDebuggerUrl of the started page, once Chromium has written its port."""
    port_file = profile / "DevToolsActivePort"
    deadline = time.monotonic() + LAUNCH_TIMEOUT_S
    while True:
        if proc.poll() is not None:
            log = (profile.parent / "chromium.log").read_text(errors="replace").strip()
            last = log.splitlines()[-1] if log else "no output"
            raise BrowserError(f"chromium exited with {proc.returncode} at start: {last}")
        # Two lines (port, browser path) once fully written; a half-written port would mislead.
        with contextlib.suppress(FileNotFoundError, ValueError):
            lines = port_file.read_text().splitlines()
            if len(lines) >= 2:
                port = int(lines[0])
                break
        if time.monotonic() > deadline:
            raise BrowserError(f"chromium wrote no DevToolsActivePort in {LAUNCH_TIMEOUT_S} s")
        time.sleep(0.1)
    # An empty ProxyHandler: an http_proxy in the environment must not see this request.
    opener = urllib.request.build_opener(urllib.request.ProxyHandler({}))
    while True:
        try:
            with opener.open(f"http://127.0.0.1:{port}/json/list", timeout=5) as response:
                targets = json.load(response)
        except OSError as exc:
            if time.monotonic() > deadline:
                raise BrowserError(f"DevTools on port {port} does not answer: {exc}") from exc
            targets = []
        pages = [t for t in targets if t.get("type") == "page" and "webSocketDebuggerUrl" in t]
        if pages:
            return pages[0]["webSocketDebuggerUrl"]
        if time.monotonic() > deadline:
            raise BrowserError("chromium lists no page target")
        time.sleep(0.1)


def _ours(pgid: int, tmp: Path) -> dict[int, str]:
    """State letter by PID of each process in group `pgid` or naming `tmp` on its command line.

    The second kind are Chromium's crash handlers, which leave the process group.
    """
    marker, found = str(tmp).encode(), {}
    for proc_dir in Path("/proc").glob("[0-9]*"):
        with contextlib.suppress(OSError, ValueError):
            stat = (proc_dir / "stat").read_text()
            state, _, pgrp = stat[stat.rindex(")") + 2:].split()[:3]
            if int(pgrp) == pgid or marker in (proc_dir / "cmdline").read_bytes():
                found[int(proc_dir.name)] = state
    return found


def _wait_until(done, limit_s: float) -> bool:
    """Poll `done()` every 50 ms for up to `limit_s`; return its last value."""
    deadline = time.monotonic() + limit_s
    while not done():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def _stop(proc: subprocess.Popen, tmp: Path) -> None:
    """Terminate everything Chromium started (SIGKILL after 5 s), reap the leader."""
    pgid = proc.pid  # start_new_session=True: the leader's PID is the group ID
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(pgid, sig)
        for pid in _ours(pgid, tmp):
            with contextlib.suppress(ProcessLookupError):
                os.kill(pid, sig)
        with contextlib.suppress(subprocess.TimeoutExpired):
            proc.wait(timeout=5)
        exited = _wait_until(lambda: all(s == "Z" for s in _ours(pgid, tmp).values()), 5)
        if exited and proc.returncode is not None:
            break
    # Helpers orphaned by the leader's exit are zombies until init reaps them; wait for that
    # so the group is really gone (os.killpg(pgid, 0) raises ProcessLookupError).
    _wait_until(lambda: not _ours(pgid, tmp), 5)


def _screenshot(cdp: _Cdp, path: Path) -> Path:
    """Write a full-page PNG of the current page to `path`."""
    metrics = cdp.call("Page.getLayoutMetrics", deadline=time.monotonic() + STEP_TIMEOUT_S)
    size = metrics.get("cssContentSize") or metrics["contentSize"]
    clip = {"x": 0, "y": 0, "width": size["width"], "height": size["height"], "scale": 1}
    shot = cdp.call("Page.captureScreenshot",
                    {"format": "png", "captureBeyondViewport": True, "clip": clip},
                    deadline=time.monotonic() + STEP_TIMEOUT_S)
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(base64.b64decode(shot["data"]))
    return path


def _drive(cdp: _Cdp, url: str, ready_js: str, probe_js: str | None, timeout_s: float,
           screenshot: Path | None, width: int, height: int) -> PageCheck:
    """Navigate, wait for load and readiness, probe and screenshot; the browser is running."""
    setup_deadline = time.monotonic() + STEP_TIMEOUT_S
    for domain in ("Runtime", "Log", "Page"):
        cdp.call(f"{domain}.enable", deadline=setup_deadline)
    # The window includes browser UI even headless; pin the viewport to exactly width x height.
    cdp.call("Emulation.setDeviceMetricsOverride",
             {"width": width, "height": height, "deviceScaleFactor": 1, "mobile": False},
             deadline=setup_deadline)
    first_event = len(cdp.events)  # a load event of the initial about:blank does not count
    start = time.monotonic()
    deadline = start + timeout_s
    try:
        nav = cdp.call("Page.navigate", {"url": url}, deadline=deadline)
    except BrowserError:
        if time.monotonic() < deadline:
            raise
        nav = None
    if nav is not None and nav.get("errorText"):
        raise BrowserError(f"navigation to {url} failed: {nav['errorText']}")
    loaded = None if nav is None else cdp.wait_event("Page.loadEventFired", deadline,
                                                     after=first_event)
    check = PageCheck(load_s=math.nan if loaded is None else loaded - start,
                      ready_s=math.nan, ready=False, value=None)
    # !!(...) gives JavaScript truthiness; a throwing expression (e.g. an undefined name) is
    # simply not ready yet.
    expression = f"!!(\n{ready_js}\n)"
    while loaded is not None:
        try:
            result = cdp.call("Runtime.evaluate",
                              {"expression": expression, "returnByValue": True},
                              deadline=deadline)
        except BrowserError:
            if time.monotonic() < deadline:
                raise
            break
        if "exceptionDetails" not in result and result["result"].get("value") is True:
            check.ready = True
            break
        if time.monotonic() + POLL_S >= deadline:
            break
        time.sleep(POLL_S)
    check.ready_s = time.monotonic() - start
    if check.ready and probe_js is not None:
        probe = cdp.call("Runtime.evaluate",
                         {"expression": probe_js, "returnByValue": True, "awaitPromise": True},
                         deadline=time.monotonic() + STEP_TIMEOUT_S)
        if "exceptionDetails" in probe:
            details = probe["exceptionDetails"]
            description = details.get("exception", {}).get("description", details.get("text"))
            check.console_errors.append(f"probe_js threw: {description}")
        else:
            check.value = probe["result"].get("value")
    if screenshot is not None and loaded is not None:
        check.screenshot = _screenshot(cdp, screenshot)
    return check


def check_page(path: Path, ready_js: str, *, probe_js: str | None = None,
               timeout_s: float = PAGE_TIMEOUT_S, screenshot: Path | None = None,
               width: int = 1400, height: int = 1000) -> PageCheck:
    """Open local file `path` in a fresh headless Chromium and report how it loaded.

    `ready_js` is a JavaScript expression polled (about every `POLL_S`) after the load event
    until it is truthy; `timeout_s` bounds the load and ready wait from navigation start.
    `probe_js` (an expression; a promise is awaited) is evaluated once ready and its JSON
    value returned. The viewport is `width` x `height` CSS pixels; `screenshot`, when given,
    receives a full-page PNG (taller than the viewport if the page scrolls). console_errors
    holds console.error/assert calls, uncaught exceptions, error-level log entries (such as
    failed resource loads) and a throwing probe_js. A page that does not load in time gives
    load_s nan and ready False.

    Raises FileNotFoundError for a missing `path`, BrowserMissing without a browser and
    BrowserError when Chromium fails to start or a DevTools step fails or times out. The
    browser, its process group and its temporary profile are gone when this returns or raises.
    """
    if timeout_s <= 0:
        raise ValueError(f"timeout_s must be positive, got {timeout_s!r}")
    if width <= 0 or height <= 0:
        raise ValueError(f"window size must be positive, got {width}x{height}")
    path = Path(path).resolve()
    if not path.is_file():
        raise FileNotFoundError(f"no such page: {path}")
    browser = find_chromium()
    tmp = Path(tempfile.mkdtemp(prefix="artb-browser-"))
    proc = ws = None
    try:
        profile = tmp / "profile"
        profile.mkdir()
        proc = _launch(browser, profile, width, height)
        ws_url = _page_websocket_url(proc, profile)
        ws = websocket.create_connection(ws_url, timeout=STEP_TIMEOUT_S, suppress_origin=True,
                                         http_no_proxy=["127.0.0.1"], enable_multithread=False)
        cdp = _Cdp(ws)
        check = _drive(cdp, path.as_uri(), ready_js, probe_js, timeout_s,
                       None if screenshot is None else Path(screenshot), width, height)
        check.console_errors[:0] = _error_messages(cdp.events)
        return check
    finally:
        if ws is not None:
            with contextlib.suppress(Exception):
                ws.close(timeout=1)
        if proc is not None:
            _stop(proc, tmp)
        shutil.rmtree(tmp, ignore_errors=True)


def main(argv: list[str] | None = None) -> int:
    """Check one page from the command line; see the module docstring for exit codes."""
    parser = argparse.ArgumentParser(prog="python -m bench.browser",
                                     description=__doc__.splitlines()[0])
    parser.add_argument("page", type=Path, help="local HTML file")
    parser.add_argument("--ready", default="document.readyState === 'complete'",
                        help="JavaScript expression that is truthy once the page is ready")
    parser.add_argument("--probe", default=None, help="JavaScript expression to print once ready")
    parser.add_argument("--screenshot", type=Path, default=None, help="write a full-page PNG")
    parser.add_argument("--timeout", type=float, default=PAGE_TIMEOUT_S,
                        help="seconds for load + ready (default 30 x ARTB_TIME_SCALE)")
    args = parser.parse_args(argv)
    try:
        check = check_page(args.page, args.ready, probe_js=args.probe, timeout_s=args.timeout,
                           screenshot=args.screenshot)
    except (FileNotFoundError, BrowserMissing) as exc:
        print(f"bench.browser: {exc}", file=sys.stderr)
        return 2
    print(f"load_s  {check.load_s:.3f}")
    print(f"ready_s {check.ready_s:.3f} ({'ready' if check.ready else 'NOT ready'})")
    if args.probe is not None:
        print(f"value   {json.dumps(check.value)}")
    if check.screenshot is not None:
        print(f"screenshot {check.screenshot}")
    print(f"errors  {len(check.console_errors)}")
    for error in check.console_errors:
        print(f"  {error}")
    return 0 if check.ready and not check.console_errors else 1


if __name__ == "__main__":
    sys.exit(main())
