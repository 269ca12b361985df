// SPDX-License-Identifier: Apache-2.0

//go:build vm

package vm_test

import (
	"context"
	"fmt"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/tidecache/tidecache/tests/testbed"
	"github.com/tidecache/tidecache/tests/vm/harness"
)

// adoptNode has a user's existing md RAID10 over four HDDs (made by the
// test with mdadm, as an administrator would have) and one SSD for a pool
// of SSDs alone.
var adoptNode = nodeSpec{HDDs: 4, HDDSize: 128 << 20, SSDs: []int64{160 << 20}}

// adoptHDDDelay is the service time dm-delay gives each HDD before the
// power cut, so that the sysbench figures of the bare array and of the
// cached one compare a spindle with an SSD rather than two host files.
const adoptHDDDelay = "8" // ms

// The database: MariaDB's datadir on the array's ext4, sysbench's tables
// and a ledger table of rows whose commits are acknowledged one by one
// on the VM's ack channel.
const (
	adoptDBDir   = "/run/adopt-db" // configuration, in guest RAM
	adoptDatadir = "/srv/db/mysql"
	adoptTables  = 4
	adoptRows    = 5000
	adoptThreads = 4
	adoptRun     = 15 * time.Second
)

// ledgerWriter inserts rows 1, 2, 3... into sbtest.ledger, each in its own
// transaction, and writes "ledger-N" to the ack channel once the commit
// of row N has returned: every acknowledged row was durable by then
// (innodb_flush_log_at_trx_commit=1).
const ledgerWriter = `sock=$1 ack=$2
i=0
while i=$((i + 1)); mariadb --socket=$sock -uroot -e "INSERT INTO sbtest.ledger VALUES ($i)"; do
	echo ledger-$i > $ack
done`

// TestAdoptDetach caches an md array that already holds a MariaDB
// database, without copying it:
//   - the database is made on ext4 on the bare array (HDDs behind
//     dm-delay) and sysbench measures it there;
//   - the refusals: the array mounted (the message gives the steps), the
//     pool's own SSD, a write-cache block larger than the filesystem's;
//   - adopt: nothing is written to the array (its first 4 MiB hash the
//     same), the database starts on /dev/mapper/tc-db, and sysbench
//     measures it through the cache (the test logs the ratio);
//   - a power cut under sysbench and a writer of acknowledged rows, with
//     dirty blocks on the SSD: boot assembly finds the array by its md
//     UUID (it assembles it: nothing else does here), InnoDB recovers,
//     every acknowledged row is there and CHECK TABLE passes;
//   - detach: drained, devices gone, and on the bare array again the
//     filesystem passes fsck and every table has the same checksum.
func TestAdoptDetach(t *testing.T) {
	besideAnother(t, 170*time.Second)
	bin, err := binaries()
	if err != nil {
		t.Fatal(err)
	}
	ctx := t.Context()
	dir := harness.TestDir(t)
	n := bootNodeIn(t, dir, bin, adoptNode)
	ssd := n.ssds()[0]
	// udevd runs, as on a server, before any device is made: Debian's
	// rules (md, dm, persistent storage) and tidecache's.
	n.startUdev()
	var members []string
	for i, hdd := range n.hdds() {
		n.mustSh(fmt.Sprintf(`dmsetup create hdd%d --table "0 $(blockdev --getsz %s) delay %s 0 %s"`, i, hdd, hdd, adoptHDDDelay))
		members = append(members, fmt.Sprintf("/dev/mapper/hdd%d", i))
	}
	n.mustSh("mdadm --create /dev/md/data --run --metadata=1.2 --homehost=any --name=data --level=10 --raid-devices=4 --assume-clean " + strings.Join(members, " "))
	n.mustSh("mkfs.ext4 -q -F " + mkfsOpts + " /dev/md/data && mkdir -p /srv/db && mount /dev/md/data /srv/db")
	db := testbed.NewMariaDB(n.runner(), adoptDBDir, adoptTables, adoptRows)
	if err := db.Configure(ctx); err != nil {
		t.Fatal(err)
	}
	version, err := db.Create(ctx, adoptDatadir)
	if err != nil {
		t.Fatal(err)
	}
	bare := measureDB(t, db, adoptDatadir)
	mustQuery(t, db, "CREATE TABLE sbtest.ledger (id INT PRIMARY KEY) ENGINE=InnoDB")
	if err := db.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	n.mustTidectl("pool create fast --ssd " + ssd)
	if out := n.mustTidectl("pool show fast"); !strings.Contains(out, "none: SSDs only") {
		t.Errorf("pool show of a pool of SSDs alone:\n%s", out)
	}

	// Refusals, each changing nothing.
	n.wantFail("volume adopt db --device /dev/md/data --write-cache 48M", "is in use", "mounted at /srv/db", "umount", "/dev/mapper/tc-db", "/etc/fstab")
	n.wantFail("volume create db --size 32M --write-cache 16M", "has no origin (SSDs only)", "volume adopt")
	n.mustSh("umount /srv/db")
	n.wantFail("volume adopt db --device "+ssd+" --write-cache 48M", "holds a tidecache superblock (pool fast)")
	// ext4 on a small array has 1 KiB blocks: a 4 KiB write cache would
	// make a device it cannot be mounted on.
	n.wantFail("volume adopt db --device /dev/md/data --write-cache 48M --block-size 4096",
		"larger than the 1024-byte unit of the ext4 filesystem", "--block-size 1024")

	// Adopting writes nothing to the array: the first 4 MiB, where a
	// pool's origin carries its superblock, read the same before and
	// after (the array's own md superblock is at its members' heads).
	head := "dd if=/dev/md/data bs=1M count=4 status=none | sha256sum"
	uuid := "mdadm --detail /dev/md/data | grep -E '^ *UUID'"
	before, arrayUUID := n.mustSh(head), n.mustSh(uuid)
	// The refused commands above opened the array: udev's watch turns
	// each close into a change event, which rebuilds the array's links.
	// Wait for those events to end before looking at the links.
	n.mustSh("udevadm settle")
	fsUUID := strings.TrimSpace(n.mustSh("blkid -s UUID -o value /dev/md/data"))
	byUUID := "/dev/disk/by-uuid/" + fsUUID
	if got, want := n.devNum(byUUID), n.devNum("/dev/md/data"); got != want {
		t.Fatalf("before adoption %s is device %s, want the array's %s\n%s", byUUID, got, want,
			n.sh("ls -l /dev/disk/by-uuid; udevadm info /dev/md/data").Stdout)
	}
	res := n.tidectl("volume adopt db --device /dev/md/data --write-cache 48M")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "Caches:       /dev/md/data (md uuid") || !strings.Contains(res.Stderr, "1024-byte blocks") {
		t.Fatalf("volume adopt: exit %d, want the device named and its 1 KiB blocks noted:\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if after := n.mustSh(head); after != before {
		t.Errorf("adopting wrote to the array's first 4 MiB: sha256 %s before, %s after", before, after)
	}
	// A mount by UUID now finds the cached volume: the array lost its
	// filesystem links (tidecache's rules), the volume has them (the udev
	// cookie of its resume), the devices inside the stack have none.
	if got, want := n.devNum(byUUID), n.devNum("/dev/mapper/tc-db"); got != want {
		t.Errorf("after adoption %s is device %s, want /dev/mapper/tc-db (%s); the array is %s\n%s",
			byUUID, got, want, n.devNum("/dev/md/data"), n.sh("ls -l /dev/disk/by-uuid; cat /etc/udev/rules.d/64-tidecache-adopted.rules; udevadm info /dev/md/data /dev/mapper/tc-db").Stdout)
	}
	if links := n.mustSh("udevadm info -q symlink /dev/md/data"); strings.Contains(links, "by-uuid") {
		t.Errorf("the adopted array keeps a by-uuid link: %s", links)
	}
	if props := n.mustSh("udevadm info -q property /dev/mapper/tc-db-origin"); !strings.Contains(props, "DM_UDEV_DISABLE_DISK_RULES_FLAG=1") {
		t.Errorf("the origin extent inside the stack is open to the disk rules:\n%s", props)
	}
	n.mustSh("mount /dev/mapper/tc-db /srv/db")
	cached := measureDB(t, db, adoptDatadir)
	t.Logf("%s, %d tables × %d rows, %d threads, %v per run, HDDs behind dm-delay %s ms: bare array %.1f TPS (p95 %v), adopted by tidecache %.1f TPS (p95 %v): %.2f×",
		version, adoptTables, adoptRows, adoptThreads, adoptRun, adoptHDDDelay, bare.TPS, bare.LatencyPct, cached.TPS, cached.LatencyPct, cached.TPS/bare.TPS)

	// The power cut: sysbench and the ledger writer running, dirty blocks
	// on the SSD.
	n.mustSh(fmt.Sprintf(`(sysbench oltp_read_write --db-driver=mysql --mysql-socket=%s --mysql-user=root --tables=%d --table-size=%d --rand-type=uniform --threads=%d --time=600 run >/run/sysbench.log 2>&1 &)`,
		db.Socket, adoptTables, adoptRows, adoptThreads))
	n.mustSh("cat > /run/ledger.sh <<'EOF'\n" + ledgerWriter + "\nEOF\n(sh /run/ledger.sh " + db.Socket + " " + n.AckDevice() + " >/run/ledger.log 2>&1 &)")
	// Ten committed rows are enough to find every one of them after the
	// cut; each costs a client process, seconds under emulation beside
	// another test.
	waitLedger(t, n, 10)
	if d := n.volume("db").WriteCache.DirtyBlocks; d == 0 {
		t.Fatal("no dirty blocks in the write cache before the power cut; the test would prove nothing")
	}
	if err := n.Kill(); err != nil {
		t.Fatal(err)
	}
	acked := ledgerAcks(t, n)

	n = bootNodeIn(t, dir, bin, adoptNode)
	db = testbed.NewMariaDB(n.runner(), adoptDBDir, adoptTables, adoptRows)
	asm := n.mustSh("tidecached assemble 2>&1")
	if v := n.volume("db"); v.State != "active" {
		t.Fatalf("after the power cut, volume db is %s, want active:\n%s", v.State, asm)
	}
	// The VM's /etc lives in RAM: assembly wrote the rules again.
	n.mustSh("grep -q 'fast/db' /etc/udev/rules.d/64-tidecache-adopted.rules")
	n.startUdev()
	if links := n.mustSh("udevadm info -q symlink /dev/md/data"); strings.Contains(links, "by-uuid") {
		t.Errorf("after assembly the adopted array has a by-uuid link: %s", links)
	}
	n.mustSh("mkdir -p /srv/db && mount /dev/mapper/tc-db /srv/db")
	if err := db.Configure(ctx); err != nil {
		t.Fatal(err)
	}
	if err := db.Start(ctx, adoptDatadir); err != nil { // InnoDB crash recovery
		t.Fatal(err)
	}
	rows := checkLedger(t, db, acked)
	t.Logf("power cut after %d acknowledged ledger rows; InnoDB recovered %d", acked, rows)
	checkTables(t, db)
	sums := mustChecksums(t, db)
	if err := db.Stop(ctx); err != nil {
		t.Fatal(err)
	}
	n.mustSh("umount /srv/db")
	n.wantFail("volume delete db", "holds your data", "tidectl volume detach db")

	res = n.tidectl("volume detach db")
	if res.ExitCode != 0 || !strings.Contains(res.Stdout, "is a plain device again") {
		t.Fatalf("volume detach: exit %d\n%s%s", res.ExitCode, res.Stdout, res.Stderr)
	}
	if devs := n.dmDevices(); len(devs) != 0 {
		t.Fatalf("devices left after detach: %v", devs)
	}
	if got := n.mustSh(uuid); got != arrayUUID {
		t.Errorf("the array after detach is another one: %s, was %s", got, arrayUUID)
	}
	n.mustSh("e2fsck -f -n /dev/md/data")
	// A plain device again, with its links.
	if got, want := n.devNum(byUUID), n.devNum("/dev/md/data"); got != want {
		t.Errorf("after detach %s is device %s, want the array's %s", byUUID, got, want)
	}
	n.mustSh("test ! -e /etc/udev/rules.d/64-tidecache-adopted.rules")
	n.mustSh("mount /dev/md/data /srv/db")
	if err := db.Start(ctx, adoptDatadir); err != nil {
		t.Fatal(err)
	}
	if got := mustChecksums(t, db); got != sums {
		t.Errorf("tables on the bare array after detach:\n%s\nwant what the cached volume held:\n%s", got, sums)
	}
	if got := checkLedger(t, db, acked); got != rows {
		t.Errorf("ledger on the bare array after detach: %d rows, the cached volume held %d", got, rows)
	}
	if err := db.Stop(ctx); err != nil {
		t.Fatal(err)
	}
}

// startUdev starts udevd in the guest and has it handle every device
// there is.
func (n *node) startUdev() {
	n.t.Helper()
	n.mustSh("/lib/systemd/systemd-udevd --daemon && udevadm trigger --action=add && udevadm settle --timeout=60")
}

// devNum returns "major:minor" of the block device at path, following
// links; "none" when there is none.
func (n *node) devNum(path string) string {
	n.t.Helper()
	res := n.sh("stat -L -c '%t:%T' " + path)
	if res.ExitCode != 0 {
		return "none"
	}
	return strings.TrimSpace(res.Stdout)
}

// runner runs commands in n's guest for testbed's helpers.
func (n *node) runner() testbed.Runner {
	return func(ctx context.Context, argv ...string) (string, error) {
		res, err := n.Exec(ctx, harness.Cmd{Argv: argv})
		if err != nil {
			return res.Stdout, err
		}
		if res.ExitCode != 0 {
			return res.Stdout, &testbed.CommandError{Argv: argv, ExitCode: res.ExitCode, Stderr: res.Stderr}
		}
		return res.Stdout, nil
	}
}

// measureDB starts the server on datadir and runs sysbench on it; the
// server is left running.
func measureDB(t *testing.T, db *testbed.MariaDB, datadir string) testbed.SysbenchResult {
	t.Helper()
	if err := db.Start(t.Context(), datadir); err != nil {
		t.Fatal(err)
	}
	r, err := db.Run(t.Context(), adoptThreads, adoptRun)
	if err != nil {
		t.Fatal(err)
	}
	if r.Transactions == 0 || r.Errors != 0 {
		t.Fatalf("sysbench on %s: %d transactions, %d errors", datadir, r.Transactions, r.Errors)
	}
	return r
}

func mustQuery(t *testing.T, db *testbed.MariaDB, sql string) string {
	t.Helper()
	out, err := db.Query(t.Context(), sql)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

func mustChecksums(t *testing.T, db *testbed.MariaDB) string {
	t.Helper()
	sums, err := db.Checksums(t.Context())
	if err != nil {
		t.Fatal(err)
	}
	return sums
}

var ledgerAck = regexp.MustCompile(`(?m)^ledger-(\d+)\r?$`)

// ledgerAcks returns the highest row the ledger writer acknowledged.
func ledgerAcks(t *testing.T, n *node) int {
	t.Helper()
	acks, err := n.Acks()
	if err != nil {
		t.Fatal(err)
	}
	high := 0
	for _, m := range ledgerAck.FindAllStringSubmatch(string(acks), -1) {
		if i, _ := strconv.Atoi(m[1]); i > high {
			high = i
		}
	}
	return high
}

// waitLedger waits until the ledger writer has acknowledged at least want
// rows. The bound is generous: the test measures nothing here, and beside
// another scenario (besideAnother) a row has taken 3 s.
func waitLedger(t *testing.T, n *node, want int) {
	t.Helper()
	const limit = 5 * time.Minute
	deadline := time.Now().Add(limit)
	for ledgerAcks(t, n) < want {
		if time.Now().After(deadline) {
			t.Fatalf("the ledger writer acknowledged %d rows in %v, want %d:\n%s", ledgerAcks(t, n), limit, want, n.sh("cat /run/ledger.log /run/sysbench.log").Stdout)
		}
		time.Sleep(time.Second)
	}
}

// checkLedger checks that the ledger holds rows 1..N with N at least the
// highest acknowledged row (the row being committed at the power cut may
// be there too), and returns N.
func checkLedger(t *testing.T, db *testbed.MariaDB, acked int) int {
	t.Helper()
	var count, high int
	out := mustQuery(t, db, "SELECT COUNT(*), COALESCE(MAX(id), 0) FROM sbtest.ledger")
	if _, err := fmt.Sscan(out, &count, &high); err != nil {
		t.Fatalf("ledger: %q: %v", out, err)
	}
	if count != high || high < acked {
		t.Fatalf("ledger holds %d rows, highest %d; %d were acknowledged: acknowledged commits are missing", count, high, acked)
	}
	return count
}

// checkTables runs CHECK TABLE on every table the test wrote.
func checkTables(t *testing.T, db *testbed.MariaDB) {
	t.Helper()
	names := []string{"sbtest.ledger"}
	for i := 1; i <= adoptTables; i++ {
		names = append(names, fmt.Sprintf("sbtest.sbtest%d", i))
	}
	out := mustQuery(t, db, "CHECK TABLE "+strings.Join(names, ", ")+" EXTENDED")
	for _, line := range strings.Split(strings.TrimSpace(out), "\n") {
		f := strings.Split(line, "\t")
		if len(f) != 4 || f[2] != "status" || f[3] != "OK" {
			t.Errorf("CHECK TABLE: %q", line)
		}
	}
	if got := strings.Count(strings.TrimSpace(out), "\n") + 1; got != len(names) {
		t.Errorf("CHECK TABLE answered %d lines for %d tables:\n%s", got, len(names), out)
	}
}
