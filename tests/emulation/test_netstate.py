"""Stopping the processes a run started (pure: no root, no network)."""

import signal
import subprocess
import sys

from emulation import netstate


def test_stop_child_needs_no_command_line(monkeypatch):
    # A child caught inside exec has an empty /proc/PID/cmdline; the controller of a run that
    # failed right after starting it must still get its SIGTERM (a missed one hung stop()).
    monkeypatch.setattr(netstate, "cmdline", lambda pid: "")
    proc = subprocess.Popen(["sleep", "60"])
    assert not netstate.pid_matches(proc.pid, "sleep")
    netstate.stop_child(proc)
    assert proc.returncode == -signal.SIGTERM


def test_stop_child_kills_what_ignores_sigterm():
    code = ("import signal, time; signal.signal(signal.SIGTERM, signal.SIG_IGN); "
            "print('ready', flush=True); time.sleep(60)")
    proc = subprocess.Popen([sys.executable, "-c", code], stdout=subprocess.PIPE, text=True)
    assert proc.stdout.readline().strip() == "ready"
    netstate.stop_child(proc, timeout_s=0.5)
    assert proc.returncode == -signal.SIGKILL
    proc.stdout.close()


def test_stop_child_of_an_ended_process_is_a_no_op():
    proc = subprocess.Popen(["true"])
    proc.wait()
    netstate.stop_child(proc)
    assert proc.returncode == 0
