#!/bin/sh
# vmtest.sh runs this package's tests inside a throwaway QEMU/KVM virtual
# machine whose kernel mounts cgroup v2 with the cpu and memory
# controllers. On a host that has only cgroup v1 (or a hybrid layout) the
# cgroup limit tests skip; this is how to exercise them there.
#
# Needs: qemu-system-x86_64, a Linux kernel image
# (KERNEL, default the newest /boot/vmlinuz-*), a static busybox, cpio, and
# Go. Run from anywhere:
#
#	internal/driver/exec/testdata/vmtest.sh [go test flags, e.g. -test.run=Memory]
#
# The VM has no disk: its root is an initramfs holding busybox (sh, sleep,
# cat ... for the tests' commands), the race-enabled test binary and the
# shared libraries it needs. It prints the test output and exits with the
# tests' status.
set -eu

pkg=$(cd "$(dirname "$0")/.." && pwd)
kernel=${KERNEL:-$(ls /boot/vmlinuz-* 2>/dev/null | sort -V | tail -n 1)}
busybox=${BUSYBOX:-$(command -v busybox || true)}
[ -n "$kernel" ] && [ -f "$kernel" ] || { echo "vmtest: no kernel image (set KERNEL)" >&2; exit 2; }
[ -n "$busybox" ] || { echo "vmtest: no busybox (install busybox-static)" >&2; exit 2; }
if ldd "$busybox" >/dev/null 2>&1; then echo "vmtest: $busybox is not static" >&2; exit 2; fi
command -v qemu-system-x86_64 >/dev/null || { echo "vmtest: no qemu-system-x86_64" >&2; exit 2; }

work=$(mktemp -d)
trap 'rm -rf "$work"' EXIT
root=$work/root
mkdir -p "$root/bin" "$root/proc" "$root/sys" "$root/tmp" "$root/dev"

(cd "$pkg" && go test -c -race -o "$root/exec.test" .)
# The race runtime needs libc: copy what the binary links to, at the same paths.
ldd "$root/exec.test" | awk '{ for (i = 1; i <= NF; i++) if ($i ~ /^\//) print $i }' | sort -u |
	while read -r lib; do
		mkdir -p "$root$(dirname "$lib")"
		cp -L "$lib" "$root$lib"
	done

cp "$busybox" "$root/bin/busybox"
for applet in sh mount poweroff sleep cat env pwd head setsid kill true echo; do
	ln -s busybox "$root/bin/$applet"
done

cat >"$root/init" <<INIT
#!/bin/sh
export PATH=/bin
mount -t proc proc /proc
mount -t sysfs sys /sys
mount -t devtmpfs dev /dev
mount -t tmpfs tmp /tmp
mount -t cgroup2 cgroup2 /sys/fs/cgroup
echo "vmtest: kernel \$(cat /proc/sys/kernel/osrelease), cgroup v2 controllers: \$(cat /sys/fs/cgroup/cgroup.controllers)"
cd /tmp
/exec.test -test.v $* 2>&1
status=\$?
# The tests must leave no cgroup behind.
for g in /sys/fs/cgroup/trellis*; do
	[ -e "\$g" ] || continue
	echo "vmtest: cgroup left behind: \$g"
	status=1
done
echo "vmtest: exit status \$status"
poweroff -f
INIT
chmod +x "$root/init"
(cd "$root" && find . | cpio -o -H newc --quiet | gzip -1) >"$work/initrd.gz"

# TCG (emulation) by default: slow but it works everywhere, nested
# virtualisation included, where KVM may hang. VMTEST_ACCEL=kvm is faster
# where KVM works.
qemu-system-x86_64 -accel "${VMTEST_ACCEL:-tcg}" -m 1024 -smp 2 -nographic -no-reboot \
	-kernel "$kernel" -initrd "$work/initrd.gz" \
	-append "console=ttyS0 quiet panic=-1" | tee "$work/out" | tr -d '\r'
status=$(tr -d '\r' <"$work/out" | sed -n 's/^vmtest: exit status \([0-9]*\)$/\1/p')
[ -n "$status" ] || { echo "vmtest: the VM did not report a status" >&2; exit 2; }
exit "$status"
