#!/usr/bin/env bash
# build.sh OUT - build the Debian 12 Vagrant box that scripts/box_test.py boots: a root filesystem
# made with debootstrap from Debian's packages only (kernel, systemd, sshd, sudo, rsync, ifupdown),
# laid out like the official debian/bookworm64 box (user vagrant with the insecure key and
# passwordless sudo, eth0 on DHCP), written as a compressed qcow2 disk with its kernel and initrd
# beside it, since the box's Vagrantfile boots them directly. Run as root. Writes into OUT:
#   box.img  vmlinuz  initrd.img      (box_test.py adds metadata.json and the box's Vagrantfile)
# OUT's files are replaced only at the end, so an interrupted build leaves no half box.
#
# Environment knobs:
#   MIRROR=http://deb.debian.org/debian   Debian mirror
#   DISK_GB=20                            the disk's virtual size (sparse)
#   EXTRA_CA_DIR=                          a directory of *.crt the box trusts too (box_test.py
#                                          passes the host's /usr/local/share/ca-certificates,
#                                          so the guest reaches what the host reaches)
set -euo pipefail

OUT=${1:?usage: build.sh OUT}
MIRROR=${MIRROR:-http://deb.debian.org/debian}
DISK_GB=${DISK_GB:-20}
EXTRA_CA_DIR=${EXTRA_CA_DIR:-}
PACKAGES=linux-image-amd64,systemd-sysv,udev,kmod,initramfs-tools,openssh-server,sudo,rsync,ifupdown,isc-dhcp-client,iproute2,ca-certificates,procps,curl
KEY=/usr/share/rubygems-integration/all/gems/vagrant-*/keys/vagrant.pub

[ "$(id -u)" = 0 ] || { echo "build.sh: run as root" >&2; exit 1; }
# shellcheck disable=SC2086
KEY=$(ls $KEY 2>/dev/null | head -n1) || true
[ -f "$KEY" ] || { echo "build.sh: vagrant's insecure public key not found (apt-get install vagrant)" >&2; exit 1; }

mkdir -p "$OUT"
WORK=$(mktemp -d "$OUT/.build.XXXXXX")
cleanup() {
    # debootstrap mounts /proc and /sys inside the root and unmounts them when it ends; a
    # killed debootstrap leaves them, so unmount whatever is still there before removing.
    local m
    for m in $(awk -v r="$WORK/" 'index($2, r) == 1 {print $2}' /proc/mounts | sort -r); do
        umount -l "$m" 2>/dev/null || true
    done
    rm -rf --one-file-system "$WORK"
}
trap cleanup EXIT
ROOT=$WORK/root

echo "debootstrap bookworm from $MIRROR"
debootstrap --variant=minbase --include="$PACKAGES" bookworm "$ROOT" "$MIRROR" >"$WORK/debootstrap.log" 2>&1 \
    || { tail -n 20 "$WORK/debootstrap.log" >&2; exit 1; }

echo "configuring"
cat >"$ROOT/etc/apt/sources.list" <<SRC
deb $MIRROR bookworm main
deb $MIRROR bookworm-updates main
deb http://deb.debian.org/debian-security bookworm-security main
SRC
echo "bookworm" >"$ROOT/etc/hostname"
printf '127.0.0.1\tlocalhost\n127.0.1.1\tbookworm\n' >"$ROOT/etc/hosts"
echo "/dev/vda / ext4 defaults,errors=remount-ro 0 1" >"$ROOT/etc/fstab"
cat >"$ROOT/etc/network/interfaces" <<NET
auto lo
iface lo inet loopback

allow-hotplug eth0
iface eth0 inet dhcp
NET
if [ -n "$EXTRA_CA_DIR" ] && compgen -G "$EXTRA_CA_DIR/*.crt" >/dev/null; then
    cp "$EXTRA_CA_DIR"/*.crt "$ROOT/usr/local/share/ca-certificates/"
fi
install -d -m 0755 "$ROOT/etc/ssh/sshd_config.d"
echo "UseDNS no" >"$ROOT/etc/ssh/sshd_config.d/vagrant.conf"
echo "vagrant ALL=(ALL) NOPASSWD: ALL" >"$ROOT/etc/sudoers.d/vagrant"
chmod 0440 "$ROOT/etc/sudoers.d/vagrant"
install -m 0644 "$KEY" "$WORK/vagrant.pub"
chroot "$ROOT" /bin/bash -euo pipefail <<'CHROOT'
useradd --create-home --shell /bin/bash vagrant
echo vagrant:vagrant | chpasswd
install -d -m 0700 -o vagrant -g vagrant /home/vagrant/.ssh
update-ca-certificates >/dev/null
apt-get clean
CHROOT
install -m 0600 -o 1000 -g 1000 "$WORK/vagrant.pub" "$ROOT/home/vagrant/.ssh/authorized_keys"
[ "$(chroot "$ROOT" id -u vagrant)" = 1000 ] || { echo "build.sh: vagrant is not uid 1000" >&2; exit 1; }

kernel=$(ls "$ROOT"/boot/vmlinuz-* | sort -V | tail -n1)
initrd=$(ls "$ROOT"/boot/initrd.img-* | sort -V | tail -n1)
cp "$kernel" "$WORK/vmlinuz"; cp "$initrd" "$WORK/initrd.img"
chmod 0644 "$WORK/vmlinuz" "$WORK/initrd.img"

echo "writing the disk (${DISK_GB} GB virtual)"
truncate -s "${DISK_GB}G" "$WORK/root.raw"
mkfs.ext4 -q -F -L root -d "$ROOT" "$WORK/root.raw"
qemu-img convert -c -O qcow2 "$WORK/root.raw" "$WORK/box.img"
rm -f "$WORK/root.raw"

for f in box.img vmlinuz initrd.img; do mv -f "$WORK/$f" "$OUT/$f"; done
echo "box written to $OUT"
