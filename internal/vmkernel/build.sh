#!/usr/bin/env bash
# Builds one guest kernel: `make tinyconfig`, the fragment merged on top,
# `make olddefconfig`, a check that every option of the fragment survived,
# then the kernel image. airlock runs this script (it is embedded in the
# binary) and owns the cache around it; by hand:
#
#   AIRLOCK_KERNEL_SOURCE=/usr/src/linux-source-6.1.tar.xz \
#   AIRLOCK_KERNEL_ARCH=x86_64 \
#   AIRLOCK_KERNEL_FRAGMENT=internal/vmkernel/fragments/x86_64.config \
#   AIRLOCK_KERNEL_WORK=/tmp/kwork AIRLOCK_KERNEL_OUT=/tmp/kout \
#   bash internal/vmkernel/build.sh
#
# Lines starting with "==> " name the step that begins; the rest is the
# output of tar and make. The compile runs under `nice -n 19`.
set -euo pipefail

src=${AIRLOCK_KERNEL_SOURCE:?the linux-source tarball}
arch=${AIRLOCK_KERNEL_ARCH:?x86_64 or arm64}
fragment=${AIRLOCK_KERNEL_FRAGMENT:?the config fragment}
work=${AIRLOCK_KERNEL_WORK:?a scratch directory}
out=${AIRLOCK_KERNEL_OUT:?the output directory}
jobs=${AIRLOCK_KERNEL_JOBS:-$(nproc)}

case "$arch" in
x86_64)
	karch=x86_64 target=vmlinux image=vmlinux cross=
	[ "$(uname -m)" = x86_64 ] || cross=x86_64-linux-gnu-
	;;
arm64)
	karch=arm64 target=Image image=arch/arm64/boot/Image cross=
	[ "$(uname -m)" = aarch64 ] || cross=aarch64-linux-gnu-
	;;
*)
	echo "unknown architecture $arch (x86_64 or arm64)" >&2
	exit 2
	;;
esac
if [ -n "$cross" ] && ! command -v "${cross}gcc" >/dev/null; then
	echo "no ${cross}gcc to cross-compile for $arch (apt-get install gcc-${cross%-})" >&2
	exit 2
fi
kmake() { make -s ARCH="$karch" CROSS_COMPILE="$cross" "$@"; }

echo "==> extract $(basename "$src")"
mkdir -p "$work"
nice -n 19 tar -C "$work" -xf "$src"
tree=$(find "$work" -mindepth 1 -maxdepth 1 -type d | head -n 1)
[ -f "$tree/Makefile" ] || { echo "no kernel tree in $src" >&2; exit 1; }
cd "$tree"

echo "==> configure $arch"
kmake tinyconfig
scripts/kconfig/merge_config.sh -m .config "$fragment" >/dev/null
kmake olddefconfig

# Every option the fragment names must be in the final .config as written
# ("# CONFIG_X is not set" lines: absent or unset). Kconfig drops an
# option quietly when a dependency is missing.
echo "==> verify"
dropped=()
while IFS= read -r line; do
	case "$line" in
	"# CONFIG_"*" is not set")
		opt=${line#\# }
		opt=${opt%% *}
		if grep -q "^$opt=" .config; then dropped+=("$line (got $(grep "^$opt=" .config))"); fi
		;;
	CONFIG_*=*)
		if ! grep -qxF -- "$line" .config; then
			opt=${line%%=*}
			got=$(grep -E "^$opt=|^# $opt is not set" .config || true)
			dropped+=("$line (got ${got:-nothing})")
		fi
		;;
	esac
done <"$fragment"
if [ ${#dropped[@]} -gt 0 ]; then
	echo "the fragment's options did not all survive make olddefconfig (a dependency is missing):" >&2
	printf '  %s\n' "${dropped[@]}" >&2
	exit 3
fi

echo "==> compile $target with $jobs jobs"
nice -n 19 make ARCH="$karch" CROSS_COMPILE="$cross" -j"$jobs" "$target"

echo "==> install"
mkdir -p "$out"
cp "$image" "$out/$(basename "$image")"
cp .config "$out/config"
kmake -s kernelrelease >"$out/release"
