// SPDX-License-Identifier: Apache-2.0

package testbed

import (
	"context"
	"fmt"
	"strconv"
	"strings"
	"time"
)

// Runner runs argv in a guest and returns its standard output; a command
// that fails is an error carrying its exit code and stderr. (*Bed).Run is
// one; the VM tests wrap their nodes' Exec in another.
type Runner func(ctx context.Context, argv ...string) (string, error)

// MariaDB drives a MariaDB server and sysbench's oltp_read_write tables in
// a guest, from Debian's packages run off the host's root: `make bench`
// measures with it, and the adopt VM test puts a database on a device
// before tidecache caches it. Every commit is durable, as on a production
// server (innodb_flush_log_at_trx_commit=1, O_DIRECT with fsync,
// doublewrite on), and the buffer pool is far smaller than the tables, so
// that reads reach the device.
type MariaDB struct {
	run Runner
	// Dir holds the configuration (a tmpfs directory of the guest).
	Dir string
	// Socket is the server's only way in (skip-networking).
	Socket string
	// Tables and TableSize size sysbench's sbtest1..N tables.
	Tables, TableSize int
	// RandType is how sysbench picks rows (--rand-type): "uniform" (the
	// default when empty), "pareto", "special", "gaussian".
	RandType string
	// CopyTables makes Create fill sbtest1 with sysbench and the other
	// tables as copies of it (INSERT … SELECT in the server), several
	// times faster under TCG than sysbench's inserts from a client, for
	// tables of hundreds of MiB. Every table then holds the same rows,
	// which changes nothing for sysbench's OLTP runs (rows are picked by
	// id in each table).
	CopyTables bool
}

// NewMariaDB returns a server set up under dir with sysbench tables of
// tables × rows. Nothing runs until Configure.
func NewMariaDB(run Runner, dir string, tables, rows int) *MariaDB {
	return &MariaDB{run: run, Dir: dir, Socket: "/run/mysqld/" + nameOf(dir) + ".sock", Tables: tables, TableSize: rows}
}

func nameOf(dir string) string {
	dir = strings.TrimRight(dir, "/")
	return dir[strings.LastIndex(dir, "/")+1:]
}

// Config is the server configuration of every run.
func (m *MariaDB) Config() string {
	return `[mariadbd]
user = root
skip-networking
socket = ` + m.Socket + `
pid-file = ` + strings.TrimSuffix(m.Socket, ".sock") + `.pid
skip-log-bin
innodb_buffer_pool_size = 16M
innodb_log_file_size = 32M
innodb_flush_method = O_DIRECT
innodb_flush_log_at_trx_commit = 1
innodb_doublewrite = 1
`
}

func (m *MariaDB) configPath() string { return m.Dir + "/my.cnf" }

// Configure writes the configuration into Dir.
func (m *MariaDB) Configure(ctx context.Context) error {
	if _, err := m.run(ctx, "sh", "-c", `mkdir -p "$1" /run/mysqld && printf '%s' "$2" > "$3"`,
		"sh", m.Dir, m.Config(), m.configPath()); err != nil {
		return fmt.Errorf("mariadb configuration: %w", err)
	}
	return nil
}

// Create makes a new datadir holding an empty sbtest database and
// sysbench's tables, and leaves the server stopped. It returns the
// server's version.
func (m *MariaDB) Create(ctx context.Context, datadir string) (string, error) {
	if _, err := m.run(ctx, "mariadb-install-db", "--defaults-file="+m.configPath(), "--datadir="+datadir,
		"--auth-root-authentication-method=normal", "--skip-test-db"); err != nil {
		return "", fmt.Errorf("mariadb-install-db %s: %w", datadir, err)
	}
	if err := m.Start(ctx, datadir); err != nil {
		return "", err
	}
	version, err := m.Query(ctx, "CREATE DATABASE sbtest; SELECT VERSION()")
	if err == nil {
		err = m.prepare(ctx)
	}
	if serr := m.Stop(ctx); err == nil {
		err = serr
	}
	if err != nil {
		return "", fmt.Errorf("sysbench tables in %s: %w", datadir, err)
	}
	return strings.TrimSpace(version), nil
}

// prepare makes the sysbench tables, sysbench's way or (CopyTables) one
// table sysbench's way and copies of it.
func (m *MariaDB) prepare(ctx context.Context) error {
	if !m.CopyTables || m.Tables < 2 {
		_, err := m.Sysbench(ctx, "prepare")
		return err
	}
	one := *m
	one.Tables = 1
	if _, err := one.Sysbench(ctx, "prepare"); err != nil {
		return err
	}
	for i := 2; i <= m.Tables; i++ {
		sql := fmt.Sprintf("CREATE TABLE sbtest.sbtest%d LIKE sbtest.sbtest1; INSERT INTO sbtest.sbtest%d SELECT * FROM sbtest.sbtest1", i, i)
		if _, err := m.Query(ctx, sql); err != nil {
			return err
		}
	}
	return nil
}

// Start starts mariadbd on datadir (its log in datadir.log) and waits
// until it answers: crash recovery after a power cut happens here.
func (m *MariaDB) Start(ctx context.Context, datadir string) error {
	if _, err := m.run(ctx, "sh", "-c", `(mariadbd --defaults-file="$1" --datadir="$2" >"$2.log" 2>&1 &)`,
		"sh", m.configPath(), datadir); err != nil {
		return fmt.Errorf("start mariadbd on %s: %w", datadir, err)
	}
	deadline := time.Now().Add(3 * time.Minute)
	for {
		if _, err := m.run(ctx, "mariadb-admin", "--socket="+m.Socket, "-uroot", "ping"); err == nil {
			return nil
		}
		if time.Now().After(deadline) {
			log, _ := m.run(ctx, "tail", "-20", datadir+".log")
			return fmt.Errorf("mariadbd on %s did not answer within 3 minutes; its log ends:\n%s", datadir, log)
		}
		select {
		case <-ctx.Done():
			return ctx.Err()
		case <-time.After(time.Second):
		}
	}
}

// Stop shuts the server down cleanly: mariadb-admin returns once the
// server has exited.
func (m *MariaDB) Stop(ctx context.Context) error {
	if _, err := m.run(ctx, "mariadb-admin", "--socket="+m.Socket, "-uroot", "shutdown"); err != nil {
		return fmt.Errorf("stop mariadbd: %w", err)
	}
	return nil
}

// Query runs SQL statements and returns their rows, tab-separated,
// without column names.
func (m *MariaDB) Query(ctx context.Context, sql string) (string, error) {
	out, err := m.run(ctx, "mariadb", "--socket="+m.Socket, "-uroot", "-N", "-e", sql)
	if err != nil {
		return "", fmt.Errorf("mariadb %q: %w", sql, err)
	}
	return out, nil
}

// Sysbench runs `sysbench oltp_read_write … cmd` against the tables.
func (m *MariaDB) Sysbench(ctx context.Context, cmd string, extra ...string) (string, error) {
	args := []string{"sysbench", "oltp_read_write", "--db-driver=mysql", "--mysql-socket=" + m.Socket, "--mysql-user=root",
		"--tables=" + strconv.Itoa(m.Tables), "--table-size=" + strconv.Itoa(m.TableSize), "--rand-type=" + m.randType()}
	args = append(append(args, extra...), cmd)
	return m.run(ctx, args...)
}

func (m *MariaDB) randType() string {
	if m.RandType == "" {
		return "uniform"
	}
	return m.RandType
}

// RunIntervals is Run that also returns the TPS of every second
// (sysbench --report-interval=1).
func (m *MariaDB) RunIntervals(ctx context.Context, threads int, d time.Duration) (SysbenchResult, []SysbenchInterval, error) {
	out, err := m.Sysbench(ctx, "run", "--threads="+strconv.Itoa(threads),
		"--time="+strconv.Itoa(int(d/time.Second)), "--percentile=95", "--report-interval=1")
	if err != nil {
		return SysbenchResult{}, nil, err
	}
	res, err := ParseSysbench(out)
	if err != nil {
		return SysbenchResult{}, nil, err
	}
	iv, err := ParseSysbenchIntervals(out)
	return res, iv, err
}

// Run measures a sysbench run of d with threads clients.
func (m *MariaDB) Run(ctx context.Context, threads int, d time.Duration) (SysbenchResult, error) {
	out, err := m.Sysbench(ctx, "run", "--threads="+strconv.Itoa(threads),
		"--time="+strconv.Itoa(int(d/time.Second)), "--percentile=95")
	if err != nil {
		return SysbenchResult{}, err
	}
	return ParseSysbench(out)
}

// Checksums returns one line per sysbench table: its name, row count and
// CHECKSUM TABLE value. Two datadirs that answer the same hold the same
// rows.
func (m *MariaDB) Checksums(ctx context.Context) (string, error) {
	var sql strings.Builder
	for i := 1; i <= m.Tables; i++ {
		fmt.Fprintf(&sql, "SELECT 'sbtest%d', COUNT(*) FROM sbtest.sbtest%d; CHECKSUM TABLE sbtest.sbtest%d EXTENDED;", i, i, i)
	}
	out, err := m.Query(ctx, sql.String())
	if err != nil {
		return "", err
	}
	return out, nil
}
