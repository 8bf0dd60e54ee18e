#!/usr/bin/env bash
# Installs the system packages that airlock's tests and demo use, when they
# are missing. Idempotent; needs root for apt-get (skipped otherwise).
set -euo pipefail

need=()
have() { dpkg-query -W -f='${Status}' "$1" 2>/dev/null | grep -q "install ok installed"; }
# docker-registry and apache2-utils (htpasswd): the OCI image tests' local
# registry; skopeo: the pull benchmark's reference. mmdebstrap (with
# the archive keyring and gpg it checks the mirror with): image variants.
# uidmap: newuidmap and newgidmap, which map an unprivileged caller's
# subordinate ids into its sandboxes. autoconf, automake, gcc, libc6-dev,
# make and perl build and run pjdfstest (test/pjdfs). python3-pytest: the
# Python SDK's tests (make python-sdk). linux-source-6.1, bc, bison,
# flex, libelf-dev and xz-utils: the vm boundary's guest kernel (make
# kernel); qemu-system-x86 and cpio: its boot test. containerd (with
# runc): the containerd shim's tests (test/containerd).
for pkg in python3 curl openssl iproute2 util-linux passwd make git ca-certificates bubblewrap erofs-utils busybox-static \
	docker-registry apache2-utils skopeo \
	mmdebstrap debian-archive-keyring gpg \
	uidmap autoconf automake gcc libc6-dev perl \
	python3-pytest \
	linux-source-6.1 bc bison flex libelf-dev xz-utils qemu-system-x86 cpio \
	containerd; do
	have "$pkg" || need+=("$pkg")
done
# The kernel's list of FUSE connections (fusectl), which systemd mounts at
# boot: an unprivileged supervisor aborts its programmable mounts'
# connections through it when a sandbox ends (root needs none: it mounts
# its own, attached nowhere).
if [ "$(id -u)" -eq 0 ] && [ -d /sys/fs/fuse/connections ] && ! mountpoint -q /sys/fs/fuse/connections; then
	mount -t fusectl fusectl /sys/fs/fuse/connections || echo "fusectl: could not be mounted at /sys/fs/fuse/connections" >&2
fi
if [ ${#need[@]} -eq 0 ]; then
	exit 0
fi
if [ "$(id -u)" -ne 0 ]; then
	echo "missing packages: ${need[*]} (run as root, or: sudo apt-get install -y ${need[*]})" >&2
	exit 1
fi
echo "installing: ${need[*]}"
export DEBIAN_FRONTEND=noninteractive
apt-get update -qq
apt-get install -y -qq --no-install-recommends "${need[@]}"
# The tests start docker-registry themselves, on loopback ports of their
# own: the service the package starts is not wanted.
if printf '%s\n' "${need[@]}" | grep -qx docker-registry && [ -d /run/systemd/system ]; then
	systemctl disable --now docker-registry >/dev/null 2>&1 || true
fi
# Nor containerd's: the tests start their own, on a private socket.
if printf '%s\n' "${need[@]}" | grep -qx containerd && [ -d /run/systemd/system ]; then
	systemctl disable --now containerd >/dev/null 2>&1 || true
fi
