"""The box recipe's pure parts (scripts/box_test.py, scripts/box/): the cache key, the box's
metadata and archive, the environment of vagrant commands, the checks applied to the guest's
results, and the Vagrantfiles' choices by environment, read by Ruby with a stand-in for
Vagrant's configuration object. `make box-test` itself boots a VM and is run by hand."""

from __future__ import annotations

import importlib.util
import json
import os
import shutil
import subprocess
import sys
import tarfile
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[2]
spec = importlib.util.spec_from_file_location("box_test", ROOT / "scripts" / "box_test.py")
box_test = importlib.util.module_from_spec(spec)
sys.modules["box_test"] = box_test
spec.loader.exec_module(box_test)

#: A stand-in for Vagrant: records the box and each provider's settings, then prints them.
RUBY_HARNESS = r"""
require "json"
$out = {"box" => nil, "providers" => {}}
class Settings
  def initialize(h) @h = h end
  def method_missing(name, *args)
    key = name.to_s
    raise NoMethodError, key unless key.end_with?("=")
    @h[key.chomp("=")] = args[0]
  end
  def respond_to_missing?(*) true end
end
class VM
  def box=(b) $out["box"] = b end
  def hostname=(_) end
  def synced_folder(*_a, **_k) end
  def provision(*_a, **_k) end
  def provider(name) yield Settings.new($out["providers"][name.to_s] ||= {}) end
end
class Config
  def vm() @vm ||= VM.new end
end
module Vagrant
  def self.configure(_version) yield Config.new end
end
load ARGV[0]
puts JSON.generate($out)
"""


def ruby() -> str:
    """Ruby's path; without it the test is skipped, or fails under ARTB_REQUIRE_EMULATION=1
    (`make test`, whose set-up installs it)."""
    found = shutil.which("ruby")
    if found is None:
        why = "ruby is not on PATH (`make setup-test` installs it to read the Vagrantfiles)"
        if os.environ.get("ARTB_REQUIRE_EMULATION") == "1":
            pytest.fail(f"ARTB_REQUIRE_EMULATION=1 but {why}", pytrace=False)
        pytest.skip(why)
    return found


def vagrantfile(path: Path, **env: str) -> subprocess.CompletedProcess:
    clean = {k: v for k, v in os.environ.items() if not k.startswith("ARTB_")}
    return subprocess.run([ruby(), "-e", RUBY_HARNESS, str(path)], capture_output=True,
                          text=True, env=clean | env, timeout=60)


def settings(path: Path, **env: str) -> dict:
    done = vagrantfile(path, **env)
    assert done.returncode == 0, done.stderr
    return json.loads(done.stdout)


def test_users_get_the_official_box_and_no_driver_override():
    got = settings(ROOT / "Vagrantfile")
    assert got["box"] == "debian/bookworm64"
    assert got["providers"]["libvirt"] == {"cpus": 2, "memory": 4096}
    assert got["providers"]["virtualbox"] == {"cpus": 2, "memory": 4096}


def test_environment_selects_the_local_box_and_qemu():
    got = settings(ROOT / "Vagrantfile", ARTB_BOX="allreduce-testbed/box-test",
                   ARTB_LIBVIRT_DRIVER="qemu")
    assert got["box"] == "allreduce-testbed/box-test"
    assert got["providers"]["libvirt"] == {"cpus": 2, "memory": 4096, "driver": "qemu",
                                           "cpu_mode": "maximum"}
    kvm = settings(ROOT / "Vagrantfile", ARTB_LIBVIRT_DRIVER="kvm")
    assert kvm["providers"]["libvirt"]["driver"] == "kvm"
    assert "cpu_mode" not in kvm["providers"]["libvirt"]
    # An empty variable is the default, not an empty box name.
    assert settings(ROOT / "Vagrantfile", ARTB_BOX=" ")["box"] == "debian/bookworm64"


def test_bad_driver_is_refused_naming_it():
    done = vagrantfile(ROOT / "Vagrantfile", ARTB_LIBVIRT_DRIVER="xen")
    assert done.returncode != 0
    assert "ARTB_LIBVIRT_DRIVER=xen: expected kvm or qemu" in done.stderr


def test_box_vagrantfile_boots_the_kernel_beside_it(tmp_path):
    box = tmp_path / "boxes" / "v0" / "libvirt"
    box.mkdir(parents=True)
    shutil.copy(ROOT / "scripts" / "box" / "Vagrantfile.box", box / "Vagrantfile")
    lv = settings(box / "Vagrantfile")["providers"]["libvirt"]
    assert lv["kernel"] == str(box / "vmlinuz")
    assert lv["initrd"] == str(box / "initrd.img")
    assert "root=/dev/vda" in lv["cmd_line"] and "net.ifnames=0" in lv["cmd_line"]


def fake_recipe(tmp_path: Path) -> Path:
    d = tmp_path / "recipe"
    d.mkdir()
    for name in box_test.RECIPE_FILES:
        (d / name).write_text(f"{name} v1\n")
    return d


def test_recipe_key_follows_every_recipe_file_and_certificate(tmp_path):
    d = fake_recipe(tmp_path)
    base = box_test.recipe_key(d)
    assert base == box_test.recipe_key(d)
    for name in box_test.RECIPE_FILES:
        (d / name).write_text(f"{name} v2\n")
        changed = box_test.recipe_key(d)
        assert changed != base
        base = changed
    ca = tmp_path / "extra.crt"
    ca.write_text("cert")
    with_ca = box_test.recipe_key(d, [ca])
    assert with_ca != base
    ca.write_text("another cert")
    assert box_test.recipe_key(d, [ca]) != with_ca


def test_the_real_recipe_has_a_key():
    assert len(box_test.recipe_key()) == 16


def test_metadata_refuses_a_bad_size():
    assert box_test.metadata(3)["virtual_size"] == 3
    for bad in (0, -1, 2.5, "20"):
        with pytest.raises(ValueError, match=repr(bad).replace(".", r"\.")):
            box_test.metadata(bad)


def test_package_box_holds_what_vagrant_libvirt_reads(tmp_path):
    src = tmp_path / "built"
    src.mkdir()
    for name in ("box.img", "vmlinuz", "initrd.img"):
        (src / name).write_bytes(name.encode())
    out = tmp_path / "x.box"
    box_test.package_box(src, out, disk_gb=7)
    with tarfile.open(out) as tar:
        assert sorted(tar.getnames()) == ["Vagrantfile", "box.img", "initrd.img",
                                          "metadata.json", "vmlinuz"]
        meta = json.load(tar.extractfile("metadata.json"))
        assert meta == {"provider": "libvirt", "format": "qcow2", "virtual_size": 7}
        assert tar.extractfile("Vagrantfile").read() == \
            (ROOT / "scripts" / "box" / "Vagrantfile.box").read_bytes()
    assert not out.with_suffix(".part").exists()


def test_vagrant_env_keeps_vagrant_state_out_of_the_user_home(tmp_path):
    env = box_test.vagrant_env({"PATH": "/bin", "ARTB_BOX": "old"}, tmp_path / "h",
                               tmp_path / "d")
    assert env["PATH"] == "/bin"
    assert env["ARTB_BOX"] == box_test.BOX_NAME and env["ARTB_LIBVIRT_DRIVER"] == "qemu"
    assert env["VAGRANT_HOME"] == str(tmp_path / "h")
    assert env["VAGRANT_DOTFILE_PATH"] == str(tmp_path / "d")
    assert env["VAGRANT_DEFAULT_PROVIDER"] == "libvirt"


def row(**kw):
    return {"scheduler": "ring", "emulated_s": 1.0, "simulated_s": 1.1,
            "sums_verified": True, "routes_verified": True} | kw


def test_check_emulated_names_each_problem():
    good = {"datapath": "kernel", "schedulers": [row(), row(scheduler="multitree")]}
    assert box_test.check_emulated(good, "kernel") == []
    bad = {"datapath": "kernel", "schedulers": [
        row(emulated_s=None, failure="timeout"), row(scheduler="tree", sums_verified=False),
        row(scheduler="ps", routes_verified=False)]}
    assert box_test.check_emulated(bad, "kernel") == [
        "ring: not measured (timeout)", "tree: sums not verified", "ps: routes not proven"]


def test_check_delay_needs_netem_the_delay_seen_and_predicted():
    doc = {"link_delay_ms": 10.0, "features": {"netem": {"available": True}},
           "calibration": {"path": ["s00", "w0_0", "s01"], "srtt_s": 0.041},
           "schedulers": [row(simulated_s=3.0)]}
    assert box_test.check_delay(doc, 10.0, 2.9) == []
    assert box_test.check_delay(doc | {"features": {"netem": {"available": False}}}, 10.0, 2.9) \
        == ["netem is not available"]
    assert box_test.check_delay(doc | {"link_delay_ms": 0.0}, 10.0, 2.9) == \
        ["link_delay_ms is 0.0, not 10"]
    assert box_test.check_delay(doc, 10.0, 3.0) == \
        ["ring: predicted 3.000 s, not above 3.000 s without delay"]
    assert box_test.check_delay(doc | {"calibration": {}}, 10.0, 2.9) == \
        ["the calibration names no path"]


def test_state_survives_a_killed_run(tmp_path):
    st = box_test.State.load(tmp_path / "state.json")
    st.add("daemons", [123, "/usr/sbin/libvirtd"])
    st.add("pools", "default")
    st.add("pools", "default")
    again = box_test.State.load(tmp_path / "state.json")
    assert again.made == {"daemons": [[123, "/usr/sbin/libvirtd"]], "pools": ["default"]}
    again.drop("pools", "default")
    assert box_test.State.load(tmp_path / "state.json").made["pools"] == []


def test_not_root_is_refused_with_status_2(monkeypatch, capsys):
    monkeypatch.setattr(box_test.os, "geteuid", lambda: 1000)
    assert box_test.main(["--cache", "/nonexistent"]) == 2
    assert "run as root" in capsys.readouterr().err


class FakeLibvirt:
    """Stands in for virsh: what exists, and every command given."""

    def __init__(self, domains=(), networks=(), volumes=(), pools=("default",)):
        self.domains, self.networks = set(domains), set(networks)
        self.volumes, self.pools = set(volumes), set(pools)
        self.calls: list[tuple[str, ...]] = []

    def virsh(self, *args, check=False, timeout=60):
        self.calls.append(args)
        out = ""
        if args[0] == "vol-list":
            out = "Name Path\n----\n" + "".join(f"{v} /x/{v}\n" for v in sorted(self.volumes))
        elif args[0] == "vol-delete":
            self.volumes.discard(args[1])
        elif args[0] == "undefine":
            self.domains.discard(args[1])
        elif args[0] == "net-undefine":
            self.networks.discard(args[1])
        elif args[0] == "pool-undefine":
            self.pools.discard(args[1])
        return subprocess.CompletedProcess(args, 0, out, "")

    def names(self, *args):
        return {"list": self.domains, "net-list": self.networks,
                "pool-list": self.pools}[args[0]]


def teardown_with(tmp_path, monkeypatch, made: dict, fake: FakeLibvirt) -> list[str]:
    monkeypatch.setattr(box_test, "virsh", fake.virsh)
    monkeypatch.setattr(box_test, "names", fake.names)
    st = box_test.State(tmp_path / "state.json", made)
    st.save()
    bt = box_test.BoxTest(tmp_path, tmp_path)
    bt.state = st
    return bt.teardown()


def test_teardown_removes_only_what_the_run_made(tmp_path, monkeypatch):
    slug_vol = f"{box_test.BOX_SLUG}_vagrant_box_image_0_1_box.img"
    fake = FakeLibvirt(domains={"ours_default", "theirs"},
                       networks={"vagrant-libvirt", "default"},
                       volumes={slug_vol, "ours_default.img", "theirs.img"})
    done = teardown_with(tmp_path, monkeypatch, {
        "domains": ["ours_default"], "pools": ["default"],
        "networks_before": ["default"], "volumes_before": ["theirs.img"]}, fake)
    assert fake.domains == {"theirs"}
    assert fake.networks == {"default"}
    assert fake.volumes == {"theirs.img"}
    assert fake.pools == set()
    assert "domain ours_default" in done and "pool default" in done
    assert box_test.State.load(tmp_path / "state.json").made["domains"] == []


def test_teardown_without_the_list_from_before_leaves_networks_and_volumes(
        tmp_path, monkeypatch):
    # A run killed before it listed what existed cannot tell its network from the user's.
    fake = FakeLibvirt(networks={"vagrant-libvirt"}, volumes={"x.img"})
    teardown_with(tmp_path, monkeypatch, {"pools": []}, fake)
    assert fake.networks == {"vagrant-libvirt"} and fake.volumes == {"x.img"}
    assert not any(call[0] in ("net-destroy", "vol-delete") for call in fake.calls)


def test_a_second_run_is_refused_while_one_holds_the_lock(tmp_path, monkeypatch, capsys):
    import fcntl

    monkeypatch.setattr(box_test.os, "geteuid", lambda: 0)
    with open(tmp_path / "lock", "w") as held:
        fcntl.flock(held, fcntl.LOCK_EX)
        assert box_test.main(["--cache", str(tmp_path), "--logs", str(tmp_path / "l")]) == 2
    assert "another box-test is running" in capsys.readouterr().err
