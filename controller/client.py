"""A small client for the controller's JSON API (standard library only)."""

from __future__ import annotations

import json
import time
import urllib.error
import urllib.request
from typing import Any


class ControllerError(RuntimeError):
    """The controller answered with an error, or could not be reached."""

    def __init__(self, message: str, status: int | None = None):
        super().__init__(message)
        self.status = status


def _route_doc(route: Any) -> dict:
    if isinstance(route, dict):
        return route
    return {"src": route.src, "dst": route.dst, "path": list(route.path),
            "tcp_port": route.tcp_port, "transfer_ids": list(getattr(route, "transfer_ids", ()))}


class ControllerClient:
    """Talk to ``python -m controller`` at ``http://host:port``."""

    def __init__(self, host: str = "127.0.0.1", port: int = 8080, timeout_s: float = 30.0):
        self.base = f"http://{host}:{port}"
        self.timeout_s = timeout_s

    def request(self, method: str, path: str, body: Any = None) -> dict:
        """Send one request; the decoded JSON reply, or ControllerError with the server's
        message and HTTP status."""
        data = None if body is None else (body if isinstance(body, bytes)
                                          else json.dumps(body).encode())
        req = urllib.request.Request(self.base + path, data=data, method=method,
                                     headers={"Content-Type": "application/json"})
        try:
            with urllib.request.urlopen(req, timeout=self.timeout_s) as reply:
                return json.loads(reply.read() or b"{}")
        except urllib.error.HTTPError as exc:
            try:
                message = json.loads(exc.read()).get("error", exc.reason)
            except ValueError:
                message = exc.reason
            raise ControllerError(f"{method} {path}: HTTP {exc.code}: {message}",
                                  exc.code) from None
        except (urllib.error.URLError, OSError) as exc:
            raise ControllerError(f"{method} {path}: controller at {self.base} not reachable: "
                                  f"{getattr(exc, 'reason', exc)}") from None

    def health(self) -> dict:
        """``{connected, expected, ready, missing, routes}``."""
        return self.request("GET", "/health")

    def wait_ready(self, timeout_s: float = 60.0, poll_s: float = 0.1,
                   alive: Any = None) -> dict:
        """Poll /health until ready; ControllerError naming the missing datapaths on timeout.
        ``alive`` (optional callable) aborts the wait early when it returns False."""
        deadline = time.monotonic() + timeout_s
        last: dict | str = "no answer"
        while time.monotonic() < deadline:
            if alive is not None and not alive():
                raise ControllerError("controller process exited while waiting for it")
            try:
                last = self.health()
                if last.get("ready"):
                    return last
            except ControllerError as exc:
                last = str(exc)
            time.sleep(poll_s)
        if isinstance(last, dict):
            raise ControllerError(
                f"controller not ready after {timeout_s:.0f} s: {last['connected']} of "
                f"{last['expected']} datapaths connected; waiting for "
                f"{', '.join(last['missing'][:8])}")
        raise ControllerError(f"controller not ready after {timeout_s:.0f} s: {last}")

    def put_routes(self, routes: Any) -> dict:
        """Install routes (Route objects or dicts) or a Schedule (has ``to_json``)."""
        if hasattr(routes, "to_json"):
            return self.request("PUT", "/routes", routes.to_json().encode())
        return self.request("PUT", "/routes", {"routes": [_route_doc(r) for r in routes]})

    def routes(self) -> list[dict]:
        """The installed schedule routes."""
        return self.request("GET", "/routes")["routes"]

    def delete_routes(self) -> dict:
        """Remove every schedule route."""
        return self.request("DELETE", "/routes")

    def route_stats(self) -> dict:
        """Per-route counters (see ``controller.proof.stats_reply``)."""
        return self.request("GET", "/routes/stats")
