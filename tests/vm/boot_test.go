// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"fmt"
	"os/exec"
	"path/filepath"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// bootMask is what a server boot in the VM leaves out: the host's enabled
// services that cost tens of seconds of emulated CPU and have nothing to do
// with tidecache's boot. MariaDB stays: the test moves its datadir onto a
// cached volume.
var bootMask = []string{"postgresql.service", "prometheus.service", "etcd.service"}

// server is a VM booted like a real server (harness.SystemdBoot): systemd,
// udev, a persistent root. tidecache comes from its .deb, on the PATH.
type server struct {
	*node
	cfg harness.Config
}

// bootServer boots cfg and waits for systemd to finish the boot; a unit
// that failed is reported, not fatal (the host's own units may fail in a
// VM), tidecache's are checked by the caller.
func bootServer(t testing.TB, cfg harness.Config) *server {
	t.Helper()
	v := harness.MustBoot(t, cfg)
	s := &server{node: &node{VM: v, t: t, bin: "/usr/sbin", dir: cfg.Dir}, cfg: cfg}
	start := time.Now()
	state := strings.TrimSpace(s.sh("systemctl is-system-running --wait").Stdout)
	t.Logf("boot: systemd %s %.1f s after the agent answered (agent up %.1f s after qemu start)",
		state, time.Since(start).Seconds(), v.BootDuration().Seconds())
	if state != "running" {
		t.Logf("failed units:\n%s", s.sh("systemctl --failed --no-legend").Stdout)
	}
	return s
}

// prop reads one property of a unit (systemctl show -P).
func (s *server) prop(unit, name string) string {
	s.t.Helper()
	return strings.TrimSpace(s.mustSh("systemctl show -P " + name + " " + unit))
}

// monotonic reads a *TimestampMonotonic property, in microseconds.
func (s *server) monotonic(unit, name string) int64 {
	s.t.Helper()
	v := s.prop(unit, name)
	n, err := strconv.ParseInt(v, 10, 64)
	if err != nil {
		s.t.Fatalf("%s %s: %q is not a number", unit, name, v)
	}
	return n
}

// uptime is the guest's /proc/uptime.
func (s *server) uptime() time.Duration {
	s.t.Helper()
	up, err := strconv.ParseFloat(strings.Fields(s.mustSh("cat /proc/uptime"))[0], 64)
	if err != nil {
		s.t.Fatal(err)
	}
	return time.Duration(up * float64(time.Second))
}

// fstabMount is a cached volume's file system, mounted through /etc/fstab
// by UUID.
type fstabMount struct {
	volume, dir, uuid string
}

// fsUUID is the UUID of the file system on volume.
func (s *server) fsUUID(volume string) string {
	s.t.Helper()
	return strings.TrimSpace(s.mustSh("blkid -s UUID -o value /dev/mapper/tc-" + volume))
}

// insertRows inserts ledger rows from..to, one committed transaction each
// (autocommit, innodb_flush_log_at_trx_commit=1: durable when acknowledged).
func (s *server) insertRows(from, to int) {
	s.t.Helper()
	var b strings.Builder
	for i := from; i <= to; i++ {
		fmt.Fprintf(&b, "INSERT INTO tc.ledger VALUES (%d);", i)
	}
	s.mustSh(`mysql -e "` + b.String() + `"`)
}

// checkMariaDB checks that MariaDB started after its datadir was mounted
// (the drop-in) and holds rows 1..rows.
func (s *server) checkMariaDB(rows int) {
	s.t.Helper()
	if got := s.prop("mariadb.service", "ActiveState"); got != "active" {
		s.t.Fatalf("mariadb.service is %s\n%s", got, s.sh("journalctl -b -u mariadb --no-pager | tail -30").Stdout)
	}
	mounted := s.monotonic("var-lib-mysql.mount", "ActiveEnterTimestampMonotonic")
	started := s.monotonic("mariadb.service", "ExecMainStartTimestampMonotonic")
	if started < mounted {
		s.t.Fatalf("mariadb started at %d µs, before its datadir was mounted at %d µs", started, mounted)
	}
	got := strings.TrimSpace(s.mustSh(`mysql -N -e "SELECT COUNT(*), COALESCE(MAX(id), 0) FROM tc.ledger"`))
	if want := fmt.Sprintf("%d\t%d", rows, rows); got != want {
		s.t.Fatalf("ledger: count and max id %q, want %q (every row was committed)", got, want)
	}
}

// checkBoot checks what a boot must give a server with cached volumes in
// /etc/fstab: tidecache-assemble ran, and before local-fs, and loaded
// tidecache's targets; each file system is mounted from its cached device;
// udev publishes each file system's UUID for the cached device only;
// tidecached reached READY=1.
func (s *server) checkBoot(mounts ...fstabMount) {
	s.t.Helper()
	assemble := "tidecache-assemble.service"
	if got := s.prop(assemble, "ActiveState") + "/" + s.prop(assemble, "Result"); got != "active/success" {
		s.t.Fatalf("%s: %s\n%s", assemble, got, s.sh("journalctl -b -u "+assemble+" --no-pager").Stdout)
	}
	// errhold is in no volume here: only the unit's modprobe loads it.
	targets := s.mustSh("dmsetup targets")
	for _, target := range []string{"fuaflush", "readfirst", "errhold"} {
		if !strings.Contains(targets, target) {
			s.t.Fatalf("dmsetup targets lacks %s after boot (%s loads it):\n%s", target, assemble, targets)
		}
	}
	assembled := s.monotonic(assemble, "ActiveEnterTimestampMonotonic")
	localFS := s.monotonic("local-fs.target", "ActiveEnterTimestampMonotonic")
	for _, m := range mounts {
		mountUnit := strings.TrimSpace(s.mustSh("systemd-escape --path --suffix=mount " + m.dir))
		mounted := s.monotonic(mountUnit, "ActiveEnterTimestampMonotonic")
		if !(assembled > 0 && assembled <= mounted && mounted <= localFS) {
			s.t.Fatalf("boot order: assembly done at %d µs, %s at %d µs, local-fs.target at %d µs; want them in that order",
				assembled, mountUnit, mounted, localFS)
		}
		s.t.Logf("boot order: assembly done %.2f s, %s mounted %.2f s, local-fs.target %.2f s after the kernel started",
			float64(assembled)/1e6, m.dir, float64(mounted)/1e6, float64(localFS)/1e6)
		if src := strings.TrimSpace(s.mustSh("findmnt -n -o SOURCE " + m.dir)); src != "/dev/mapper/tc-"+m.volume {
			s.t.Fatalf("%s is mounted from %q, want /dev/mapper/tc-%s", m.dir, src, m.volume)
		}
		s.checkByUUID(m.volume, m.uuid)
	}
	daemon := "tidecached.service"
	if got := s.prop(daemon, "ActiveState") + "/" + s.prop(daemon, "SubState"); got != "active/running" {
		s.t.Fatalf("%s: %s (Type=notify: active only after READY=1)\n%s", daemon, got,
			s.sh("journalctl -b -u "+daemon+" --no-pager | tail -40").Stdout)
	}
}

// checkDevices checks that udev and device-mapper agree on the volumes'
// devices: each /dev/mapper/tc-<volume> is the symlink udev's dm rules make
// (dmsetup without udev makes a device node instead), and no udev cookie is
// left waiting (every change waited for its rules, none leaked a semaphore).
func (s *server) checkDevices(volumes ...string) {
	s.t.Helper()
	for _, v := range volumes {
		if res := s.sh("test -L /dev/mapper/tc-" + v); res.ExitCode != 0 {
			s.t.Fatalf("/dev/mapper/tc-%s is not udev's symlink:\n%s", v, s.sh("ls -l /dev/mapper/").Stdout)
		}
	}
	if cookies := strings.TrimSpace(s.mustSh("dmsetup udevcookies | tail -n +2")); cookies != "" {
		s.t.Fatalf("udev cookies left behind:\n%s", cookies)
	}
}

// checkByUUID checks udev's view of the devices: the file system's UUID
// link names the cached device, and no /dev/disk/by-uuid link names an
// inner device of a tidecache stack (origin extent, cache slices, legs),
// whose stale copy of the file system a mount by UUID could pick.
func (s *server) checkByUUID(volume, fsUUID string) {
	s.t.Helper()
	s.mustSh("udevadm settle")
	top := strings.TrimSpace(s.mustSh("readlink -f /dev/mapper/tc-" + volume))
	if got := strings.TrimSpace(s.mustSh("readlink -f /dev/disk/by-uuid/" + fsUUID)); got != top {
		s.t.Fatalf("/dev/disk/by-uuid/%s names %s, want the cached device %s (tc-%s)\n%s",
			fsUUID, got, top, volume, s.sh("ls -l /dev/disk/by-uuid/").Stdout)
	}
	// Each line: link target, and the dm UUID of the target if it has one.
	out := s.mustSh(`for l in /dev/disk/by-uuid/*; do d=$(readlink -f "$l"); ` +
		`u=$(cat /sys/class/block/${d#/dev/}/dm/uuid 2>/dev/null); echo "${l##*/} $d ${u:--}"; done`)
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		if len(f) == 3 && strings.HasPrefix(f[2], "TIDECACHE-") && !strings.HasPrefix(f[2], "TIDECACHE-top-") {
			s.t.Fatalf("udev published an inner tidecache device under /dev/disk/by-uuid: %s\n%s", line, out)
		}
	}
	// udev never probed an inner device: none has the file system's
	// identifiers in its udev properties (blkid run by hand still reads
	// them; what matters is what udev publishes).
	inner := s.mustSh(`for d in /sys/class/block/dm-*; do u=$(cat $d/dm/uuid); case $u in TIDECACHE-top-*) ;; ` +
		`TIDECACHE-*) echo "${d##*/} $u $(udevadm info --query=property --name=${d##*/} | grep -c '^ID_FS_UUID=')";; esac; done`)
	for _, line := range strings.Split(strings.TrimSpace(inner), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[2] != "0" {
			s.t.Fatalf("udev probed an inner tidecache device (ID_FS_UUID set): %s\n%s", line, inner)
		}
	}
	if strings.TrimSpace(inner) == "" {
		s.t.Fatal("no inner tidecache devices found; the check would prove nothing")
	}
}

// checkFiles checks each file's SHA-256 against want.
func (s *server) checkFiles(want map[string]string) {
	s.t.Helper()
	for path, sum := range want {
		got := strings.Fields(s.mustSh("sha256sum " + path))[0]
		if got != sum {
			s.t.Fatalf("%s: sha256 %s, want %s (acknowledged by fsync before the reboot)", path, got, sum)
		}
	}
}

// writeFiles writes n files of random data with fsync and returns their
// SHA-256 by path.
func (s *server) writeFiles(dir, prefix string, n int) map[string]string {
	s.t.Helper()
	out := s.mustSh(fmt.Sprintf(`set -e; mkdir -p %[1]s; for i in $(seq %[3]d); do f=%[1]s/%[2]s$i; `+
		`dd if=/dev/urandom of=$f bs=64k count=4 conv=fsync status=none; sha256sum $f; done; sync -f %[1]s`, dir, prefix, n))
	sums := map[string]string{}
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Fields(line)
		sums[f[1]] = f[0]
	}
	if len(sums) != n {
		s.t.Fatalf("wrote %d files, got %d sums:\n%s", n, len(sums), out)
	}
	return sums
}

// buildDeb builds the package with `make deb` into dir.
func buildDeb(t *testing.T, dir string) string {
	t.Helper()
	root, err := filepath.Abs("../..")
	if err != nil {
		t.Fatal(err)
	}
	make := exec.CommandContext(t.Context(), "make", "--no-print-directory", "-C", root, "deb",
		"BIN="+filepath.Join(dir, "bin"), "SHARE="+filepath.Join(dir, "share"),
		"DEBROOT="+filepath.Join(dir, "debroot"), "DEB_OUT="+dir)
	if out, err := make.CombinedOutput(); err != nil {
		t.Fatalf("make deb: %v\n%s", err, out)
	}
	debs, _ := filepath.Glob(filepath.Join(dir, "tidecache_*.deb"))
	if len(debs) != 1 {
		t.Fatalf("make deb made %v, want one package", debs)
	}
	return debs[0]
}
