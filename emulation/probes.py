"""Traffic probes on a running EmulatedNetwork: all-pairs ping and a single-flow goodput
measurement (Python sockets inside the hosts; Mininet's iperf helpers hang here)."""

from __future__ import annotations

import json
import subprocess
import sys

from emulation.plan import EmulationError


def ping_all(net, timeout_s: float = 1.0) -> dict:
    """One ping between every ordered pair of servers, all hosts at once; pairs that miss
    it (a 2-core machine starting hundreds of pings) get one retry with a longer wait.
    ``{"sent", "received", "loss_pct", "failed": [(src, dst), ...], "retried"}``."""
    hosts = list(net.topology.hosts)
    pairs = {src: [d for d in hosts if d != src] for src in hosts}
    failed = _ping(net, pairs, timeout_s)
    retry: dict[str, list[str]] = {}
    for src, dst in failed:
        retry.setdefault(src, []).append(dst)
    still = _ping(net, retry, 3 * timeout_s) if retry else []
    sent = sum(len(d) for d in pairs.values())
    return {"sent": sent, "received": sent - len(still),
            "loss_pct": 100.0 * len(still) / sent if sent else 0.0, "failed": still,
            "retried": len(failed)}


def _ping(net, pairs: dict[str, list[str]], timeout_s: float) -> list[tuple[str, str]]:
    wait = max(1, round(timeout_s))
    for src, dsts in pairs.items():
        targets = " ".join(net.ip(d) for d in dsts)
        net.host(src).sendCmd(
            f"for ip in {targets}; do (ping -c1 -W{wait} -q $ip >/dev/null 2>&1 "
            "&& echo OK $ip || echo FAIL $ip) & done; wait")
    by_ip = {a.ip: h for h, a in net.topology.hosts.items()}
    failed, answered = [], 0
    for src in pairs:
        for line in net.host(src).waitOutput().splitlines():
            parts = line.split()
            if len(parts) == 2 and parts[0] in ("OK", "FAIL"):
                answered += 1
                if parts[0] == "FAIL":
                    failed.append((src, by_ip[parts[1]]))
    expected = sum(len(d) for d in pairs.values())
    if answered != expected:
        raise EmulationError(f"ping_all: {answered} results for {expected} pairs")
    return failed


def measure_goodput(net, src: str, dst: str, seconds: float = 3.0, port: int = 5001,
                    warmup_s: float = 0.5) -> float:
    """Single TCP flow src -> dst for ``seconds`` (base routes, or a schedule route when
    ``port`` is one); the receiver's goodput in Mbit/s after ``warmup_s``."""
    return measure_flow(net, src, dst, seconds, port, warmup_s)["mbps"]


def measure_flow(net, src: str, dst: str, seconds: float = 3.0, port: int = 5001,
                 warmup_s: float = 0.5) -> dict:
    """``measure_goodput``'s flow, with what the sender's TCP reports at its end:
    ``{"mbps", "srtt_s", "rto_s"}`` (smoothed round trip and retransmission timeout, from
    TCP_INFO)."""
    receiver = net.popen(dst, [sys.executable, "-c", _RECEIVER, net.ip(dst), str(port),
                               str(warmup_s)], text=True)
    sender = net.popen(src, [sys.executable, "-c", _SENDER, net.ip(dst), str(port),
                             str(seconds)], text=True)
    try:
        out, err = receiver.communicate(timeout=seconds + 20)
        sender_out, sender_err = sender.communicate(timeout=10)
    except subprocess.TimeoutExpired:
        raise EmulationError(f"goodput probe {src}->{dst} timed out") from None
    finally:
        kill(sender)
        kill(receiver)
    if receiver.returncode != 0 or sender.returncode != 0:
        raise EmulationError(f"goodput probe {src}->{dst} failed: {err.strip()[-300:]} "
                             f"{sender_err.strip()[-300:]}")
    result = json.loads(out)
    tcp = json.loads(sender_out)
    return {"mbps": result["bytes"] * 8 / result["seconds"] / 1e6,
            "srtt_s": tcp["rtt_us"] / 1e6, "rto_s": tcp["rto_us"] / 1e6}


def kill(proc) -> None:
    """Kill a process if it still runs and reap it."""
    if proc.poll() is None:
        proc.kill()
    try:
        proc.wait(timeout=5)
    except subprocess.TimeoutExpired:
        pass


_RECEIVER = r"""
import json, socket, sys, time
ip, port, warmup = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
srv = socket.socket(); srv.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
srv.bind((ip, port)); srv.listen(1); srv.settimeout(15)
conn, _ = srv.accept(); conn.settimeout(15)
first = start = last = None; counted = 0
while True:
    chunk = conn.recv(1 << 16)
    if not chunk:
        break
    now = time.monotonic()
    if first is None:
        first = now
    elif start is None:
        if now - first >= warmup:
            start = now
    else:
        counted += len(chunk); last = now
print(json.dumps({"bytes": counted, "seconds": (last - start) if last else 1e-9}))
"""

_SENDER = r"""
import json, socket, struct, sys, time
ip, port, seconds = sys.argv[1], int(sys.argv[2]), float(sys.argv[3])
deadline = time.monotonic() + 10
while True:
    try:
        s = socket.create_connection((ip, port), timeout=2); break
    except OSError:
        if time.monotonic() > deadline: raise
        time.sleep(0.05)
block = b"x" * (1 << 16); end = time.monotonic() + seconds
while time.monotonic() < end:
    s.sendall(block)
# struct tcp_info: 8 one-byte fields, then 32-bit tcpi_rto (us) first and tcpi_rtt 16th.
info = s.getsockopt(socket.IPPROTO_TCP, socket.TCP_INFO, 104)
rto, rtt = struct.unpack_from("I", info, 8)[0], struct.unpack_from("I", info, 8 + 4 * 15)[0]
print(json.dumps({"rto_us": rto, "rtt_us": rtt}))
s.close()
"""
