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

// reboot reboots cleanly through systemd and boots the next one.
func (s *server) reboot() *server {
	s.t.Helper()
	s.mustSh("systemctl --no-block reboot")
	select {
	case <-s.Done():
	case <-time.After(harness.ShutdownTimeout):
		s.Kill()
		s.t.Fatalf("the clean reboot did not end in %v; console:\n%s", harness.ShutdownTimeout, tailLines(s.ConsoleLog(), 40))
	}
	if !strings.Contains(s.ConsoleLog(), "reboot: Restarting system") {
		s.t.Fatalf("qemu ended without a clean reboot; console:\n%s", tailLines(s.ConsoleLog(), 40))
	}
	return bootServer(s.t, s.cfg)
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

// addMount makes a mount point for the file system on volume, puts it in
// /etc/fstab by UUID and mounts it, as the README says.
func (s *server) addMount(volume, dir, fstype string) fstabMount {
	s.t.Helper()
	uuid := s.fsUUID(volume)
	s.mustSh(fmt.Sprintf("mkdir -p %[2]s && echo 'UUID=%[1]s %[2]s %[3]s defaults 0 2' >> /etc/fstab && "+
		"systemctl daemon-reload && mount %[2]s", uuid, dir, fstype))
	return fstabMount{volume: volume, dir: dir, uuid: uuid}
}

// moveMariaDB follows the README's "Move a MariaDB datadir onto a cached
// volume" step by step (XFS wants 300 MB at least), then makes a ledger
// table.
func (s *server) moveMariaDB() fstabMount {
	s.t.Helper()
	s.mustTidectl("volume create mysql --size 320M --write-cache 64M")
	s.mustSh(`set -e
mkfs.xfs -q /dev/mapper/tc-mysql
systemctl stop mariadb
mkdir /mnt/newdata && mount /dev/mapper/tc-mysql /mnt/newdata
cp -a /var/lib/mysql/. /mnt/newdata/
umount /mnt/newdata
mv /var/lib/mysql /var/lib/mysql.old && mkdir /var/lib/mysql
echo "UUID=$(blkid -s UUID -o value /dev/mapper/tc-mysql) /var/lib/mysql xfs defaults 0 0" >> /etc/fstab
systemctl daemon-reload && mount /var/lib/mysql
chown mysql:mysql /var/lib/mysql && chmod 0755 /var/lib/mysql
mkdir -p /etc/systemd/system/mariadb.service.d
cp /usr/share/tidecache/systemd/mariadb.service.d/tidecache.conf /etc/systemd/system/mariadb.service.d/
systemctl daemon-reload && systemctl start mariadb`)
	s.mustSh(`mysql -e "CREATE DATABASE tc; CREATE TABLE tc.ledger (id INT PRIMARY KEY) ENGINE=InnoDB"`)
	return fstabMount{volume: "mysql", dir: "/var/lib/mysql", uuid: s.fsUUID("mysql")}
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

// TestSystemdBoot installs the .deb on a VM that boots like a server
// (systemd as PID 1, udev) and follows the README's install: a pool, a
// volume with a file system in /etc/fstab by UUID, an md array that already
// holds a file system adopted where it is (also in fstab by UUID), the
// daemon enabled and a volume made through it, and MariaDB's datadir moved
// onto a cached volume with the README's steps. It then reboots cleanly and
// after a power cut, and checks each time that boot assembly ran before
// local file systems, each file system mounted from its cached device with
// every fsync'd file and committed MariaDB row intact, MariaDB started only
// after its datadir's mount, udev named the cached devices, never an inner
// device or the adopted array, by the file systems' UUIDs, and tidecached
// reached READY=1 and keeps its watchdog fed.
func TestSystemdBoot(t *testing.T) {
	// The watchdog (30 s, pinged every 15 s) is the only clock here, and
	// one vCPU of two host cores keeps it fed beside another scenario.
	besideAnother(t)
	dir := harness.TestDir(t)
	deb := buildDeb(t, dir)
	spec := nodeSpec{HDDs: 4, HDDSize: 384 << 20, SSDs: []int64{384 << 20}, Spares: []int64{128 << 20, 128 << 20}}
	cfg := harness.Config{
		Name: "server", Dir: dir, Disks: spec.disks(dir), MemoryMiB: 1536, CPUs: vmCPUs(t),
		// The package's DKMS build provides the modules, not the harness.
		NoFUAFlushModule: true, NoReadFirstModule: true, NoErrHoldModule: true,
		Systemd: &harness.SystemdBoot{RootImage: filepath.Join(dir, "root.img"), Mask: bootMask},
	}
	s := bootServer(t, cfg)
	s.spec = spec

	start := time.Now()
	// man-db's index rebuild is not tidecache's: about 7 s under TCG.
	s.mustSh("echo 'man-db man-db/auto-update boolean false' | debconf-set-selections")
	out := s.mustSh("DEBIAN_FRONTEND=noninteractive apt-get install -y " + deb + " 2>&1")
	t.Logf("apt-get install (with the DKMS build of dm-fuaflush, dm-readfirst and dm-errhold): %.1f s", time.Since(start).Seconds())
	for _, m := range []string{"dm-fuaflush", "dm-readfirst", "dm-errhold"} {
		if mod := strings.TrimSpace(s.mustSh("modinfo -n " + m)); !strings.Contains(mod, "/updates/dkms/") {
			t.Fatalf("%s is %s, want the package's DKMS build under updates/dkms\n%s", m, mod, out)
		}
	}
	if got := strings.TrimSpace(s.sh("systemctl is-enabled tidecache-assemble.service").Stdout); got != "enabled" {
		t.Fatalf("tidecache-assemble.service is %q after install, want enabled", got)
	}

	// The README's install: pool, volume, file system, fstab, daemon.
	s.createPool("fast")
	s.mustTidectl("volume create db --size 128M --write-cache 64M")
	if v := s.volume("db"); v.Mode != "writeback" {
		t.Fatalf("volume db is in %s mode, want writeback", v.Mode)
	}
	s.mustSh("mkfs.ext4 -q /dev/mapper/tc-db")
	db := s.addMount("db", "/srv/db", "ext4")
	// An md array that already holds a file system, adopted where it is
	// (README: cache a database without moving it). Before adoption udev
	// names the array by the file system's UUID; after, and after every
	// boot, the cached volume (tidecache's rules for adopted devices).
	spares := s.spares()
	s.mustSh("mdadm --create /dev/md/data --run --level=1 --raid-devices=2 --assume-clean " + strings.Join(spares, " ") +
		" && mkfs.ext4 -q -b 4096 /dev/md/data && udevadm settle")
	s.mustTidectl("volume adopt data --device /dev/md/data --write-cache 32M")
	data := s.addMount("data", "/srv/data", "ext4")
	s.mustSh("systemctl enable --now tidecached.service")
	// The daemon, in its sandbox, builds a volume too (README: through
	// the embedded etcd).
	s.mustTidectl("--etcd-endpoints http://127.0.0.1:2389 volume create logs --size 64M --write-cache 32M --wait")
	volumes := []string{db.volume, data.volume, "logs"}
	s.checkDevices(volumes...)
	s.checkByUUID("db", db.uuid)
	s.checkByUUID("data", data.uuid)
	files := s.writeFiles(db.dir, "first", 8)
	adopted := s.writeFiles(data.dir, "first", 4)
	mysql := s.moveMariaDB()
	volumes = append(volumes, mysql.volume)
	s.insertRows(1, 20)
	// README: the volumes made before the daemon ran come under its
	// management, the adopted one too; it reports each as applied, and
	// manages them across the reboots below.
	imported := s.mustSh("TIDECACHE_ETCD_ENDPOINTS=http://127.0.0.1:2389 tidectl volume import --all")
	for _, v := range []string{db.volume, data.volume, mysql.volume} {
		if !strings.Contains(imported, "volume "+v+": spec written") {
			t.Fatalf("volume import --all did not write %s's spec:\n%s", v, imported)
		}
		s.eventually(3*time.Minute, "tidectl --etcd-endpoints http://127.0.0.1:2389 -o json volume show "+v+" | tr -d ' ' | grep -o '\"state\":\"active\"'", `"state":"active"`)
	}
	if again := s.mustSh("TIDECACHE_ETCD_ENDPOINTS=http://127.0.0.1:2389 tidectl volume import --all"); !strings.Contains(again, "nothing to import") {
		t.Fatalf("a second import --all: %s", again)
	}

	t.Run("clean reboot", func(t *testing.T) {
		s = s.reboot()
		s.checkBoot(db, data, mysql)
		s.checkDevices(volumes...)
		s.checkFiles(files)
		s.checkFiles(adopted)
		s.checkMariaDB(20)
		// The watchdog holds: the daemon stays up for more than its
		// WatchdogSec, and systemd saw pings after READY=1.
		daemon := "tidecached.service"
		wd, err := time.ParseDuration(strings.ReplaceAll(s.prop(daemon, "WatchdogUSec"), "us", "µs"))
		if err != nil || wd == 0 {
			t.Fatalf("tidecached.service WatchdogUSec %q: want a watchdog (%v)", s.prop(daemon, "WatchdogUSec"), err)
		}
		ready := s.monotonic(daemon, "ActiveEnterTimestampMonotonic")
		// Monotonic timestamps count from the kernel's start, as
		// /proc/uptime does.
		for s.uptime() < time.Duration(ready)*time.Microsecond+wd+5*time.Second {
			time.Sleep(2 * time.Second)
		}
		if got := s.prop(daemon, "NRestarts") + " " + s.prop(daemon, "ActiveState"); got != "0 active" {
			t.Fatalf("tidecached.service after %v with a %v watchdog: restarts and state %q, want \"0 active\"\n%s",
				wd+5*time.Second, wd, got, s.sh("journalctl -b -u "+daemon+" --no-pager | tail -40").Stdout)
		}
		if pinged := s.monotonic(daemon, "WatchdogTimestampMonotonic"); pinged <= ready {
			t.Fatalf("tidecached.service: last watchdog ping at %d µs, not after READY=1 at %d µs", pinged, ready)
		}
	})

	t.Run("power cut", func(t *testing.T) {
		more := s.writeFiles(db.dir, "second", 8)
		moreAdopted := s.writeFiles(data.dir, "second", 4)
		s.insertRows(21, 40)
		if d := s.volume("db").WriteCache.DirtyBlocks; d == 0 {
			t.Fatal("no dirty blocks before the power cut; the test would prove nothing")
		}
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		s = bootServer(t, s.cfg)
		s.checkBoot(db, data, mysql)
		s.checkDevices(volumes...)
		s.checkMariaDB(40)
		for _, f := range []map[string]string{files, adopted, more, moreAdopted} {
			s.checkFiles(f)
		}
	})
}
