// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"bufio"
	"fmt"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/vm/harness"
)

// readmeSections are the sections of README.md whose first sh block
// TestREADME runs, in this order: a server's install from the package to a
// pool, a cached MariaDB datadir, an adopted array, the daemon and the
// lifecycle. A section renamed or moved without this list fails the test.
var readmeSections = []string{
	"## Install on a real server",
	"### A pool and a cached volume",
	"### Move a MariaDB datadir onto the cached volume",
	"### Cache an array where it already is",
	"### The node daemon",
	"### Lifecycle, live and crash-safe",
}

// readmeBlock returns the first ```sh block under heading in the markdown
// at path: the block must come before the next heading.
func readmeBlock(path, heading string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	var (
		sc                       = bufio.NewScanner(f)
		inSection, inFence, isSh bool
		block                    strings.Builder
	)
	for sc.Scan() {
		line := sc.Text()
		switch {
		case strings.HasPrefix(line, "```") && inFence:
			if isSh {
				return block.String(), nil
			}
			inFence = false
		case strings.HasPrefix(line, "```"):
			inFence, isSh = true, inSection && strings.TrimSpace(line) == "```sh"
		case inFence:
			if isSh {
				block.WriteString(line + "\n")
			}
		case strings.HasPrefix(line, "#"):
			if inSection {
				return "", fmt.Errorf("%s: section %q has no sh block", path, heading)
			}
			inSection = strings.TrimSpace(line) == heading
		}
	}
	if err := sc.Err(); err != nil {
		return "", err
	}
	return "", fmt.Errorf("%s: no section %q with an sh block", path, heading)
}

// readmeSize reads a README size in G as M: the VM's disks are a
// thousandth of a server's.
var readmeSize = regexp.MustCompile(`\b(\d+)G\b`)

// nonLetters turns a heading into a file name.
var nonLetters = regexp.MustCompile(`[^a-z]+`)

// hostBuilt are the README lines the test runs on the host instead of the
// VM, which has no Go toolchain: buildDeb runs the same make target.
var hostBuilt = regexp.MustCompile(`^make deb(\s+#.*)?$`)

// readmeScript turns a README block into a bash script that runs each
// command line as written, stops at the first that fails and names it
// (set -e alone would not stop at the first command of `a && b`), in
// workdir, with the environment earlier blocks exported (env, as one
// operator's shell would keep it). It returns the script and its command
// lines by number.
func readmeScript(block, workdir, env string) (string, []string, error) {
	var (
		b     strings.Builder
		lines []string
	)
	fmt.Fprintf(&b, "set -o pipefail\ncd %s\n[ -f %s ] && . %s\n", workdir, env, env)
	for _, line := range strings.Split(readmeSize.ReplaceAllString(block, "${1}M"), "\n") {
		cmd := strings.TrimSpace(line)
		switch {
		case cmd == "" || strings.HasPrefix(cmd, "#"):
			continue
		case hostBuilt.MatchString(cmd):
			continue
		case strings.HasPrefix(cmd, "make "):
			return "", nil, fmt.Errorf("README line %q: the VM has no Go toolchain to make it; run it on the host as hostBuilt does", cmd)
		}
		lines = append(lines, cmd)
		fmt.Fprintf(&b, "{ %s\n} || { echo 'README command %d failed' >&2; exit 1; }\n", cmd, len(lines))
	}
	fmt.Fprintf(&b, "export -p > %s\n", env)
	return b.String(), lines, nil
}

// runREADME runs one README section's block on the server, as root in a
// login-less shell like an operator's.
func (s *server) runREADME(readme, heading, workdir string) string {
	s.t.Helper()
	block, err := readmeBlock(readme, heading)
	if err != nil {
		s.t.Fatal(err)
	}
	script, lines, err := readmeScript(block, workdir, "/root/readme.env")
	if err != nil {
		s.t.Fatal(err)
	}
	path := filepath.Join(s.dir, "readme-"+strings.Trim(nonLetters.ReplaceAllString(strings.ToLower(heading), "-"), "-")+".sh")
	if err := os.WriteFile(path, []byte(script), 0o644); err != nil {
		s.t.Fatal(err)
	}
	start := time.Now()
	res := s.sh("bash " + path + " 2>&1")
	s.t.Logf("README %s: %d commands in %.1f s\n%s", heading, len(lines), time.Since(start).Seconds(), tailLines(res.Stdout, 30))
	if res.ExitCode != 0 {
		failed := "(before its first command)"
		var n int
		if _, err := fmt.Sscanf(tailLines(res.Stdout, 1), "README command %d failed", &n); err == nil && n >= 1 && n <= len(lines) {
			failed = lines[n-1]
		}
		// The failed command and what it said first: a CI excerpt may
		// keep only the head of a long message.
		s.t.Fatalf("README %s: %s failed (exit %d); its last lines:\n%s\nthe whole block's output:\n%s",
			heading, failed, res.ExitCode, tailLines(res.Stdout, 6), res.Stdout)
	}
	return res.Stdout
}

// TestREADMEScript checks how a README block becomes a script, on the host
// side of the VM package: every command line kept in order, comments and
// `make deb` left out, sizes in G read as M, any other make refused.
func TestREADMEScript(t *testing.T) {
	block := "make deb   # build\n# a comment\ntidectl volume create mysql --size 500G --write-cache 40G\n\nmkfs.xfs /dev/mapper/tc-mysql && echo 2GiB\n"
	script, lines, err := readmeScript(block, "/w", "/e")
	if err != nil {
		t.Fatal(err)
	}
	want := []string{"tidectl volume create mysql --size 500M --write-cache 40M", "mkfs.xfs /dev/mapper/tc-mysql && echo 2GiB"}
	if strings.Join(lines, "\n") != strings.Join(want, "\n") {
		t.Fatalf("lines %q, want %q", lines, want)
	}
	for _, frag := range []string{"cd /w\n", "{ mkfs.xfs /dev/mapper/tc-mysql && echo 2GiB\n} || { echo 'README command 2 failed' >&2; exit 1; }", "export -p > /e\n"} {
		if !strings.Contains(script, frag) {
			t.Fatalf("script lacks %q:\n%s", frag, script)
		}
	}
	if _, _, err := readmeScript("make install\n", "/w", "/e"); err == nil {
		t.Fatal("a make line other than make deb was accepted")
	}
	for _, h := range readmeSections {
		if _, err := readmeBlock("../../README.md", h); err != nil {
			t.Fatal(err)
		}
	}
}

// TestREADME installs the .deb on a VM that boots like a server (systemd
// as PID 1, udev, MariaDB) and runs README.md's install sections as
// written (readmeSections): the package, a pool on NVMe SSDs and the HDD
// RAID10, MariaDB's datadir moved onto a cached volume, an md array that
// already holds a file system adopted where it is, the daemon enabled and
// the volumes imported under it, a volume made through it, a live mode
// change, a resize of a volume that is not the last on the array and an
// SSD replaced. It then cuts the power with dirty blocks in the write
// caches and checks that boot assembly ran before local file systems,
// each file system mounted from its cached device with every fsync'd file
// and committed MariaDB row intact, MariaDB started only after its datadir's
// mount, udev named the cached devices, never an inner device or the
// adopted array, by the file systems' UUIDs, and tidecached reached
// READY=1 and keeps its watchdog fed.
func TestREADME(t *testing.T) {
	// The watchdog (30 s, pinged every 15 s) is the only clock here, and
	// one vCPU of two host cores keeps it fed beside another scenario.
	besideAnother(t, 10*time.Minute)
	dir := harness.TestDir(t)
	readme, err := filepath.Abs("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	// The package in build/ of a working directory, where the README's
	// `make deb` leaves it.
	work := filepath.Join(dir, "src")
	if err := os.MkdirAll(filepath.Join(work, "build"), 0o755); err != nil {
		t.Fatal(err)
	}
	deb := buildDeb(t, dir)
	if err := os.Rename(deb, filepath.Join(work, "build", filepath.Base(deb))); err != nil {
		t.Fatal(err)
	}
	// The HDDs of /dev/md0 (room for mysql grown to 800M and logs), the
	// two disks of /dev/md1, then three NVMe SSDs.
	spec := nodeSpec{HDDs: 4, HDDSize: 640 << 20, Spares: []int64{128 << 20, 128 << 20}}
	disks := spec.disks(dir)
	for i := 0; i < 3; i++ {
		disks = append(disks, harness.Disk{Path: filepath.Join(dir, fmt.Sprintf("nvme%d.img", i)), Size: 256 << 20, NVMe: true})
	}
	cfg := harness.Config{
		Name: "server", Dir: dir, Disks: disks, MemoryMiB: 1536, CPUs: vmCPUs(t),
		// The package's DKMS build provides the modules, not the harness.
		NoFUAFlushModule: true, NoReadFirstModule: true, NoErrHoldModule: true,
		Systemd: &harness.SystemdBoot{RootImage: filepath.Join(dir, "root.img"), Mask: bootMask},
	}
	s := bootServer(t, cfg)
	s.spec = spec

	// The server as the README finds it: an HDD RAID10 (empty), and a
	// data array with a file system in /etc/fstab by UUID, mounted.
	// apt answers its question itself, as an operator would; man-db's
	// index rebuild is not tidecache's (about 7 s under TCG).
	spares := s.spares()
	s.mustSh(fmt.Sprintf(`set -e
for d in nvme0n1 nvme1n1 nvme2n1; do test -b /dev/$d; done
mdadm --create /dev/md0 --run --level=10 --raid-devices=4 --assume-clean %s
mdadm --create /dev/md1 --run --level=1 --raid-devices=2 --assume-clean %s
mkfs.ext4 -q -b 4096 /dev/md1 && udevadm settle
mkdir -p /srv/archive
echo "UUID=$(blkid -s UUID -o value /dev/md1) /srv/archive ext4 defaults 0 2" >> /etc/fstab
systemctl daemon-reload && mount /srv/archive
echo 'APT::Get::Assume-Yes "true";' > /etc/apt/apt.conf.d/90assume-yes
echo 'man-db man-db/auto-update boolean false' | debconf-set-selections`,
		strings.Join(s.hdds(), " "), strings.Join(spares, " ")))
	archived := s.writeFiles("/srv/archive", "before", 4)

	start := time.Now()
	s.runREADME(readme, readmeSections[0], work)
	t.Logf("the package's install (with the DKMS build of dm-fuaflush, dm-readfirst and dm-errhold): %.1f s", time.Since(start).Seconds())
	for _, m := range []string{"dm-fuaflush", "dm-readfirst", "dm-errhold"} {
		if mod := strings.TrimSpace(s.mustSh("modinfo -n " + m)); !strings.Contains(mod, "/updates/dkms/") {
			t.Fatalf("%s is %s, want the package's DKMS build under updates/dkms", m, mod)
		}
	}
	if got := strings.TrimSpace(s.sh("systemctl is-enabled tidecache-assemble.service").Stdout); got != "enabled" {
		t.Fatalf("tidecache-assemble.service is %q after install, want enabled", got)
	}

	s.runREADME(readme, readmeSections[1], work)
	if v := s.volume("mysql"); v.Mode != "writeback" {
		t.Fatalf("volume mysql is in %s mode, want writeback", v.Mode)
	}
	s.runREADME(readme, readmeSections[2], work)
	s.mustSh(`mysql -e "CREATE DATABASE tc; CREATE TABLE tc.ledger (id INT PRIMARY KEY) ENGINE=InnoDB"`)
	s.insertRows(1, 10)
	mysql := fstabMount{volume: "mysql", dir: "/var/lib/mysql", uuid: s.fsUUID("mysql")}

	s.runREADME(readme, readmeSections[3], work)
	archive := fstabMount{volume: "archive", dir: "/srv/archive", uuid: s.fsUUID("archive")}
	s.checkFiles(archived)
	s.checkByUUID("archive", archive.uuid)
	files := s.writeFiles(archive.dir, "first", 4)

	out := s.runREADME(readme, readmeSections[4], work)
	for _, v := range []string{"mysql", "archive"} {
		if !strings.Contains(out, "volume "+v+": spec written") {
			t.Fatalf("volume import --all did not write %s's spec:\n%s", v, out)
		}
	}
	if v := s.volume("mysql"); v.Mode != "writeback" || v.WriteCache.DirtyBlocks != 0 {
		t.Fatalf("volume mysql after the README's mode changes and flush: mode %s, %d dirty blocks; want writeback, 0",
			v.Mode, v.WriteCache.DirtyBlocks)
	}
	s.insertRows(11, 20)

	s.runREADME(readme, readmeSections[5], work)
	if got := strings.TrimSpace(s.mustSh("blockdev --getsize64 /dev/mapper/tc-mysql")); got != fmt.Sprint(800<<20) {
		t.Fatalf("tc-mysql is %s bytes after the README's resize, want %d", got, 800<<20)
	}
	if got, err := strconv.ParseInt(strings.TrimSpace(s.mustSh("findmnt -n -b -o SIZE /var/lib/mysql")), 10, 64); err != nil || got < 700<<20 {
		t.Fatalf("/var/lib/mysql is %d bytes after xfs_growfs (%v), want about 800 MiB", got, err)
	}
	ssds := s.mustTidectl("-o json pool show fast")
	if !strings.Contains(ssds, "/dev/nvme2n1") || strings.Contains(ssds, "/dev/nvme1n1") {
		t.Fatalf("pool fast after the README's replace-ssd: want nvme2n1 in place of nvme1n1:\n%s", ssds)
	}
	s.checkMariaDB(20)
	volumes := []string{"mysql", "archive", "logs"}
	s.checkDevices(volumes...)
	for _, v := range volumes {
		s.eventually(3*time.Minute, "tidectl --etcd-endpoints http://127.0.0.1:2389 -o json volume show "+v+" | tr -d ' ' | grep -o '\"state\":\"active\"'", `"state":"active"`)
	}

	t.Run("power cut", func(t *testing.T) {
		more := s.writeFiles(archive.dir, "second", 8)
		s.insertRows(21, 40)
		if d := s.volume("archive").WriteCache.DirtyBlocks; d == 0 {
			t.Fatal("no dirty blocks before the power cut; the test would prove nothing")
		}
		if err := s.Kill(); err != nil {
			t.Fatal(err)
		}
		s = bootServer(t, s.cfg)
		s.checkBoot(mysql, archive)
		s.checkDevices(volumes...)
		s.checkMariaDB(40)
		for _, f := range []map[string]string{archived, files, more} {
			s.checkFiles(f)
		}
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
}
