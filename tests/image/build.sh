#!/usr/bin/env bash
# Build the test-host root filesystem with debootstrap and import it into podman as $1.
# A test double's home: it is only the base OS of the lab and molecule hosts. Production
# roles never rely on anything in it beyond a plain Debian 12 with python3 and systemd.
set -euo pipefail
tag=$1
here=$(cd "$(dirname "$0")" && pwd)
mirror=${DDTREE_DEBIAN_MIRROR:-http://deb.debian.org/debian}
rootfs=$(mktemp -d /var/tmp/ddtree-rootfs.XXXXXX)
trap 'rm -rf "$rootfs"' EXIT
pkgs=$(grep -vE '^\s*(#|$)' "$here/packages.txt" | paste -sd, -)
echo "image: debootstrap bookworm ($pkgs)"
debootstrap --variant=minbase --include="$pkgs" bookworm "$rootfs" "$mirror" >"$rootfs.log" 2>&1 \
  || { tail -20 "$rootfs.log"; exit 1; }
rm -f "$rootfs.log"
# Host keys are made per container at first boot, not baked into the image.
rm -f "$rootfs"/etc/ssh/ssh_host_*
mkdir -p "$rootfs/etc/systemd/system/ssh.service.d"
cat >"$rootfs/etc/systemd/system/ssh.service.d/10-hostkeys.conf" <<'UNIT'
[Service]
ExecStartPre=
ExecStartPre=/usr/bin/ssh-keygen -A
ExecStartPre=/usr/sbin/sshd -t
UNIT
printf 'UseDNS no\nPermitRootLogin prohibit-password\n' >"$rootfs/etc/ssh/sshd_config.d/10-testhost.conf"
# Units that have nothing to do inside a container.
for u in getty.target console-getty.service systemd-udevd.service systemd-udevd-control.socket \
         systemd-udevd-kernel.socket systemd-remount-fs.service sys-kernel-debug.mount \
         systemd-networkd-wait-online.service apt-daily.timer apt-daily-upgrade.timer \
         nginx.service; do
  ln -sf /dev/null "$rootfs/etc/systemd/system/$u"
done
: >"$rootfs/etc/machine-id"
rm -rf "$rootfs"/var/cache/apt/archives/*.deb "$rootfs"/var/lib/apt/lists/*
tar -C "$rootfs" -c . | podman import --change 'CMD ["/sbin/init"]' --change 'STOPSIGNAL SIGRTMIN+3' - "$tag" >/dev/null
echo "image: imported $tag"
