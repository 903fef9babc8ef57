#!/usr/bin/env bash
# setup.sh - install and start what the testbed needs: apt packages, a venv with Ryu 4.34 (patched),
# Mininet, torch (CPU), Ray and this project (editable), a `python` wrapper for sudo, and Open vSwitch
# with the userspace datapath. Idempotent; a second run only checks. Run as root.
#
#   bash scripts/setup.sh           everything, then the self-check
#   bash scripts/setup.sh --check   only the self-check (one line per item; exit 1 if any is missing)
#
# Environment knobs:
#   VENV=<repo>/.venv  where the virtualenv lives (use a local disk path if the repo sits on a
#                      filesystem without symlinks, e.g. a VirtualBox shared folder)
#   PYTHON=...         interpreter for a new venv (default: python3.11 if it runs, else python3; >= 3.11)
#   OVS_TSO=0          1 = OVS userspace TSO on (faster, but less even HTB shares); read when
#                      ovs-vswitchd starts. 0 (with veth tx offload off) shapes most accurately.
#   ARTB_TEST_TOOLS=0  1 = also install what only the tests need: Debian's chromium, which opens
#                      the run report in a headless browser, and ruby, which reads the
#                      Vagrantfiles (`make test` sets it)
# Never uses `mn -c`, pkill or killall: those hit things this project did not start.
set -euo pipefail

REPO=$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd -P)
VENV=${VENV:-$REPO/.venv}
case $VENV in /*) ;; *) VENV=$PWD/$VENV ;; esac
OVS_TSO=${OVS_TSO:-0}
OVSCTL=/usr/share/openvswitch/scripts/ovs-ctl
WRAPPER=/usr/local/bin/python
WRAPPER_MARK="allreduce-testbed python wrapper"
STAMP=$VENV/.allreduce-testbed-installed
CHECKED=$VENV/.allreduce-testbed-pip-check
APT_PKGS=(mininet openvswitch-switch openvswitch-common iperf3 ethtool iproute2 iputils-ping
          net-tools procps psmisc curl ca-certificates sudo make python3-venv)
ARTB_TEST_TOOLS=${ARTB_TEST_TOOLS:-0}
[ "$ARTB_TEST_TOOLS" = 1 ] && APT_PKGS+=(chromium ruby)
# Appended, not prepended: a non-login root shell may lack the sbin dirs, but the caller's own
# python3 (pyenv, ...) keeps precedence.
export PATH=$PATH:/usr/local/sbin:/usr/local/bin:/usr/sbin:/usr/bin:/sbin:/bin
export DEBIAN_FRONTEND=noninteractive PIP_DISABLE_PIP_VERSION_CHECK=1

die() { echo "setup.sh: $*" >&2; exit 1; }
now_ms() { local t=${EPOCHREALTIME/[.,]/}; echo $((t / 1000)); }
secs_since() { local d=$(($(now_ms) - $1)); printf '%d.%d s' $((d / 1000)) $((d % 1000 / 100)); }
step() {  # step NAME FUNCTION: run it (errexit stays on inside) and print how long it took
    local t0; t0=$(now_ms)
    echo "=== $1"
    "$2"
    echo "=== $1: done in $(secs_since "$t0")"
}

# --- 1. apt packages ------------------------------------------------------------------------------
step_apt() {
    local p missing=()
    for p in "${APT_PKGS[@]}"; do
        [ "$(dpkg-query -W -f='${db:Status-Status}' "$p" 2>/dev/null)" = installed ] || missing+=("$p")
    done
    if [ ${#missing[@]} -eq 0 ]; then echo "all ${#APT_PKGS[@]} packages present"; return; fi
    echo "installing: ${missing[*]}"
    apt-get update -qq
    # Without systemd the postinst cannot start OVS (policy-rc.d): step 5 starts it.
    apt-get install -y -qq --no-install-recommends "${missing[@]}"
}

# --- 2. venv --------------------------------------------------------------------------------------
py_ok() { "$1" -c 'import sys; sys.exit(sys.version_info < (3, 11))' >/dev/null 2>&1; }

pick_python() {
    local c
    if [ -n "${PYTHON:-}" ]; then
        py_ok "$PYTHON" || die "PYTHON=$PYTHON is not a working Python >= 3.11 ($("$PYTHON" --version 2>&1 || true))"
        echo "$PYTHON"; return
    fi
    for c in python3.11 python3; do
        if command -v "$c" >/dev/null && py_ok "$c"; then echo "$c"; return; fi
    done
    die "no Python >= 3.11 found (python3 is $(python3 --version 2>&1 || echo absent)); set PYTHON=/path/to/python3.11"
}

step_venv() {
    if [ -x "$VENV/bin/python" ] && py_ok "$VENV/bin/python"; then
        echo "$VENV exists ($("$VENV/bin/python" --version))"; return
    fi
    local py; py=$(pick_python)
    echo "creating $VENV with $py ($("$py" --version))"
    "$py" -m venv --clear "$VENV"
}

# --- 3. Python packages ---------------------------------------------------------------------------
# This machine's pip config names local index dirs that lack most packages: drop that noise.
vpip() { "$VENV/bin/python" -m pip "$@" 2> >(grep -v "^WARNING: Location '.*' is ignored" >&2); }

satisfied() {  # satisfied REQ...: every requirement is installed in the venv (no network, fast)
    "$VENV/bin/python" - "$@" <<'EOF'
import sys
from importlib.metadata import PackageNotFoundError, version
try:
    from pip._vendor.packaging.requirements import Requirement
except ImportError:
    sys.exit(1)
for spec in sys.argv[1:]:
    req = Requirement(spec)
    try:
        if not req.specifier.contains(version(req.name), prereleases=True):
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
}

project_installed() {  # editable install of THIS checkout, with all its (and dev's, ray's) requirements
    [ -f "$STAMP" ] && [ "$(cat "$STAMP")" = "$(project_stamp)" ] || return 1
    "$VENV/bin/python" - "$REPO" <<'EOF'
import json, pathlib, sys
from importlib.metadata import PackageNotFoundError, distribution, version
from pip._vendor.packaging.requirements import Requirement
try:
    dist = distribution("allreduce-testbed")
except PackageNotFoundError:
    sys.exit(1)
url = json.loads(dist.read_text("direct_url.json") or "{}")
if url.get("url") != pathlib.Path(sys.argv[1]).as_uri() or not url.get("dir_info", {}).get("editable"):
    sys.exit(1)
for spec in dist.requires or []:
    req = Requirement(spec)
    if req.marker and not any(req.marker.evaluate({"extra": e}) for e in ("", "dev", "ray")):
        continue
    try:
        if not req.specifier.contains(version(req.name), prereleases=True):
            sys.exit(1)
    except PackageNotFoundError:
        sys.exit(1)
EOF
}

project_stamp() { echo "$REPO $(sha256sum "$REPO/pyproject.toml" | cut -d' ' -f1)"; }

patch_ryu() {
    # Ryu 4.34 imports eventlet.wsgi.ALREADY_HANDLED, removed in eventlet >= 0.30.3, and
    # eventlet <= 0.30.2 does not run on Python 3.11. One-line patch, idempotent.
    "$VENV/bin/python" - <<'EOF'
import pathlib, ryu.app
p = pathlib.Path(ryu.app.__file__).with_name('wsgi.py')
s = p.read_text()
old = ("    from eventlet.wsgi import ALREADY_HANDLED\n"
       "    _ALREADY_HANDLED = ALREADY_HANDLED\n")
new = ("    import eventlet.wsgi as _ew\n"
       "    _ALREADY_HANDLED = getattr(_ew, 'ALREADY_HANDLED', [])\n")
if old in s:
    p.write_text(s.replace(old, new)); print('patched', p)
elif new in s:
    print('already patched', p)
else:
    raise SystemExit('unexpected ryu/app/wsgi.py content: ' + str(p))
EOF
}

step_pip() {
    local sdn=(ryu==4.34 eventlet==0.33.3 'dnspython>=2,<3' mininet==2.3.0.dev6)
    if satisfied "${sdn[@]}"; then echo "ryu, eventlet, dnspython, mininet present"; else
        # ryu 4.34 is sdist-only and its setup.py fails with setuptools >= 67; build isolation
        # would fetch the newest setuptools, hence --no-build-isolation. No cache: a cached
        # wheel would hide a broken build. setuptools < 67 is needed only for this build: torch
        # (next) requires setuptools >= 77.0.3 and upgrades it; Ryu and Mininet run with that.
        vpip install -q --progress-bar off --no-cache-dir 'setuptools>=64,<67' wheel pbr
        vpip install -q --progress-bar off --no-cache-dir --no-build-isolation "${sdn[@]}"
    fi
    patch_ryu
    if satisfied torch==2.13.0 'setuptools>=77.0.3'; then echo "torch present"; else
        # PyPI's Linux x86_64 torch is a multi-GB CUDA build. Take a CPU wheel that pip's own
        # config already offers (find-links on our machines); elsewhere (a laptop VM) PyTorch's
        # CPU index, whose 2.13.0+cpu outranks PyPI's 2.13.0.
        local cpu_index=() probe; probe=$(mktemp -d)
        if ! vpip download -q --no-deps --no-index -d "$probe" torch==2.13.0 >/dev/null 2>&1; then
            cpu_index=(--extra-index-url https://download.pytorch.org/whl/cpu)
            echo "no local torch wheel: using PyTorch's CPU index"
        fi
        rm -rf "$probe"
        vpip install -q --progress-bar off "${cpu_index[@]}" torch==2.13.0
    fi
    if project_installed; then echo "allreduce-testbed (editable) and its requirements present"; else
        # --no-build-isolation: build with the venv's setuptools (>= 64: PEP 660 editable).
        rm -f "$STAMP"
        (cd "$REPO" && vpip install -q --progress-bar off --no-build-isolation -e '.[dev,ray]')
        project_stamp >"$STAMP"
    fi
    # pip check reads every installed distribution (about 1 s); it is skipped when the set of
    # installed distributions (their metadata folders, which name each version) is the one
    # it last passed on.
    local listing; listing=$(installed_listing)
    if [ -f "$CHECKED" ] && [ "$(cat "$CHECKED")" = "$listing" ]; then
        echo "requirements consistent (pip check passed on these distributions)"; return
    fi
    rm -f "$CHECKED"
    vpip check >/dev/null || { vpip check; die "inconsistent requirements in $VENV (see above)"; }
    echo "$listing" >"$CHECKED"
}

installed_listing() {  # a digest of the venv's installed distributions and their versions
    local site; site=$("$VENV/bin/python" -c 'import sysconfig; print(sysconfig.get_path("purelib"))')
    find "$site" -maxdepth 1 -name '*.dist-info' -printf '%f\n' | sort | sha256sum | cut -d' ' -f1
}

# --- 4. `python` wrapper for sudo (secure_path puts /usr/local/bin first) --------------------------
step_wrapper() {
    if [ -e "$WRAPPER" ] && ! grep -qs "$WRAPPER_MARK" "$WRAPPER"; then
        echo "WARNING: $WRAPPER exists and is not ours: left alone; use $VENV/bin/python instead of 'sudo python'"
        return
    fi
    local tmp; tmp=$(mktemp "$WRAPPER.XXXXXX")
    cat >"$tmp" <<EOF
#!/bin/sh
# $WRAPPER_MARK, written by $REPO/scripts/setup.sh; safe to delete.
# Runs the .venv of the allreduce-testbed checkout holding the current directory, else the venv
# that installed this wrapper, so 'sudo python -m emulation.run' works from any checkout.
d=\$(pwd -P)
while :; do
    if [ -x "\$d/.venv/bin/python" ] && grep -qs '^name = "allreduce-testbed"' "\$d/pyproject.toml"; then
        exec "\$d/.venv/bin/python" "\$@"
    fi
    [ "\$d" = / ] && break
    d=\$(dirname "\$d")
done
[ -x "$VENV/bin/python" ] && exec "$VENV/bin/python" "\$@"
exec /usr/bin/python3 "\$@"
EOF
    chmod 755 "$tmp"
    if cmp -s "$tmp" "$WRAPPER"; then rm -f "$tmp"; echo "$WRAPPER up to date"
    else mv -f "$tmp" "$WRAPPER"; echo "wrote $WRAPPER"; fi
}

# --- 5. Open vSwitch (userspace datapath; no kernel module needed) ---------------------------------
# ovs-vsctl without --no-wait hangs while ovs-vswitchd is down: every call has a --timeout.
ovs_answering() {
    ovs-vsctl --timeout=5 show >/dev/null 2>&1 && ovs-appctl --timeout=5 -t ovs-vswitchd version >/dev/null 2>&1
}

tso_wanted() { [ "$OVS_TSO" = 1 ] && echo true || echo false; }

step_ovs() {
    local want; want=$(tso_wanted)
    if ovs_answering; then
        local have
        have=$(ovs-vsctl --timeout=5 --if-exists get Open_vSwitch . other_config:userspace-tso-enable | tr -d '"')
        # Not changed under a running ovs-vswitchd: it turns TSO on at once but cannot turn it
        # off again, and a switch made so mid-run stopped passing even ARP on our links.
        [ "${have:-false}" = "$want" ] || echo "WARNING: OVS runs with userspace-tso-enable=${have:-false}," \
            "not $want (OVS_TSO=$OVS_TSO); to change it, with no emulation running:" \
            "ovs-appctl -t ovs-vswitchd exit, then rerun this script"
        echo "OVS already running"; return
    fi
    if [ "$(cat /proc/1/comm 2>/dev/null)" = systemd ] && systemctl cat openvswitch-switch.service >/dev/null 2>&1; then
        systemctl start ovsdb-server.service
        ovs-vsctl --timeout=10 --no-wait set Open_vSwitch . other_config:userspace-tso-enable="$want"
        systemctl start openvswitch-switch.service
    else
        # 'ulimit: error setting limit' and 'Kernel has no loadable module support' are harmless.
        "$OVSCTL" --no-ovs-vswitchd start --system-id=random
        ovs-vsctl --timeout=10 --no-wait set Open_vSwitch . other_config:userspace-tso-enable="$want"
        "$OVSCTL" --no-ovsdb-server start --system-id=random
    fi
    local _
    for _ in $(seq 20); do ovs_answering && { echo "OVS up (userspace-tso-enable=$want)"; return; }; sleep 0.5; done
    die "OVS did not answer after start; see /var/log/openvswitch/"
}

# --- 6. self-check --------------------------------------------------------------------------------
vpy() { (cd / && "$VENV/bin/python" "$@"); }  # from /: the editable install, not the cwd, must work

have_cmds() { local c; for c; do command -v "$c" >/dev/null || { echo "$c not found"; return 1; }; done; }

selfcheck() {
    # The items run at once (most start a Python that imports a heavy package); their lines
    # are printed in order when all have ended.
    local dir n=0 bad=0 line
    dir=$(mktemp -d)
    item() {  # item [--optional] WHAT FIX COMMAND...: an optional item warns, never fails
        local level=MISSING; [ "$1" = --optional ] && { level=WARNING; shift; }
        local what=$1 fix=$2 file; shift 2
        file=$dir/$(printf %03d $n); n=$((n + 1))
        (
            if out=$("$@" 2>&1); then echo "ready:   $what" >"$file"; exit; fi
            echo "$level: $what -> $fix${out:+ [$(tail -n1 <<<"$out")]}" >"$file"
            [ $level = WARNING ] || touch "$file.bad"
        ) <&0 &  # <&0: an item's here-document stays its input (not /dev/null)
    }
    local fix="run: bash scripts/setup.sh (as root)"
    item "root" "run as root (sudo)" test "$(id -u)" = 0
    item "Open vSwitch answering (ovsdb-server and ovs-vswitchd)" "$fix; logs in /var/log/openvswitch/" ovs_answering
    item "mnexec on PATH" "apt-get install mininet" have_cmds mnexec
    if [ "$ARTB_TEST_TOOLS" = 1 ]; then
        item "chromium on PATH (tests open the report in it)" "apt-get install chromium" \
            have_cmds chromium
        item "ruby on PATH (tests read the Vagrantfiles)" "apt-get install ruby" have_cmds ruby
    fi
    item "iperf3, ethtool, tc on PATH" "apt-get install iperf3 ethtool iproute2" \
        have_cmds iperf3 ethtool tc
    item "Mininet importable from $VENV" "$fix" vpy -c 'import mininet.net'
    item "Ryu 4.34 importable and patched" "$fix" \
        vpy -c 'import ryu.app.wsgi; from ryu.base import app_manager'
    item "Ray importable (sweeps, agent.train --workers)" "$fix (pip install '.[ray]')" \
        vpy -c 'import ray'
    item "torch importable, CPU build" "$fix (torch==2.13.0, CPU wheel)" \
        vpy -c 'import sys, torch; sys.exit(torch.version.cuda is not None)'
    item "allreduce-testbed installed (editable, from $REPO)" "$fix" vpy - "$REPO" <<'EOF'
import importlib.util, pathlib, sys
for name in ("topology", "traffic", "simulator", "agent", "controller", "emulation"):
    spec = importlib.util.find_spec(name)
    origin = pathlib.Path(spec.origin).resolve() if spec and spec.origin else None
    if origin is None or pathlib.Path(sys.argv[1]) not in origin.parents:
        sys.exit(f"{name}: found {origin}")
EOF
    # numba compiles these on first use (about 15 s) and caches them beside the sources.
    item "compiled simulator, chain, max-flow and arborescence loops built (numba cache)" "$fix" vpy - <<'EOF'
import numpy as np
import topology
from agent.chains import longest_chain
from simulator import simulate
from traffic.arborescence import min_arborescence
from traffic.collectives import build
from traffic.maxflow import Network
graph = topology.make_graph("bcube", n=2, k=1)
simulate(graph, build("ring", graph, 4096, "float32"))
none = np.zeros(2, np.int64)
longest_chain(none, none[:0], none, none[:0], np.ones(1), np.ones(1), 0.0)
Network(2, np.array([0]), np.array([1]), np.array([1])).flow(0, 1, 1)
min_arborescence(np.array([[0.0, 1.0, 1.0], [1.0, 0.0, 1.0], [1.0, 1.0, 0.0]]), 0)
EOF
    item --optional "'sudo python' runs $VENV/bin/python" "$fix (writes $WRAPPER unless it is not ours)" \
        bash -c "cd '$REPO' && command -v sudo >/dev/null && [ \"\$(env PATH=/usr/local/bin:/usr/bin:/bin python -c 'import sys; print(sys.prefix)')\" = '$VENV' ]"
    wait
    for line in "$dir"/[0-9][0-9][0-9]; do cat "$line"; [ -e "$line.bad" ] && bad=1; done
    rm -rf "$dir"
    return $bad
}

# --------------------------------------------------------------------------------------------------
case "${1:-}" in
    --check) selfcheck; exit ;;
    "") ;;
    *) echo "usage: $0 [--check]" >&2; exit 2 ;;
esac
[ "$(id -u)" = 0 ] || die "run as root: sudo bash scripts/setup.sh"
T0=$(now_ms)
step "1/6 apt packages" step_apt
step "2/6 venv $VENV" step_venv
step "3/6 Python packages" step_pip
step "4/6 python wrapper $WRAPPER" step_wrapper
step "5/6 Open vSwitch" step_ovs
echo "=== 6/6 self-check"
rc=0
selfcheck || rc=$?
echo "=== setup.sh: $([ $rc = 0 ] && echo ready || echo 'NOT ready') after $(secs_since "$T0")"
exit $rc
