// SPDX-License-Identifier: Apache-2.0

package mdraid

import (
	"context"
	"errors"
	"os"
	"os/exec"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/tidecache/tidecache/pkg/command"
	"golang.org/x/sys/unix"
)

// fakeMdadm is an mdadm stand-in: a shell script first in PATH that logs
// its arguments and acts on files of a temporary /dev and /sys.
//
//	--create/--assemble <path> ...  link <path> to the md127 node, start it
//	--detail --export <path>        print $TC_DETAIL (fails if <path> is missing)
//	--detail --scan                 print $TC_SCAN
//	--examine --scan ...            print $TC_EXAMINE
//	--stop <path>                   remove <path>
//
// $TC_FAIL, when set, makes the named mode fail like mdadm does.
const fakeMdadm = `#!/bin/sh
echo "$*" >> "$TC_LOG"
if [ -n "$TC_FAIL" ] && [ "$1" = "$TC_FAIL" ]; then
	echo "mdadm: cannot open /dev/vdb: Device or resource busy" >&2
	exit 1
fi
case "$1" in
--create|--assemble)
	mkdir -p "$(dirname "$2")"
	ln -s ../md127 "$2"
	echo clean > "$TC_STATE" ;;
--detail)
	if [ "$2" = --scan ]; then
		[ -n "$TC_SCAN" ] && cat "$TC_SCAN"
		exit 0
	fi
	if [ ! -e "$3" ]; then
		echo "mdadm: cannot open $3: No such file or directory" >&2
		exit 1
	fi
	cat "$TC_DETAIL" ;;
--examine)
	[ -n "$TC_EXAMINE" ] && cat "$TC_EXAMINE"
	exit 0 ;;
--stop)
	rm -f "$2" ;;
*)
	exit 2 ;;
esac
`

type fakeHost struct {
	t      *testing.T
	m      Manager
	dev    string // fake /dev
	sys    string // fake /sys
	log    string
	env    map[string]string
	member []string // zeroed member images
}

func newFakeHost(t *testing.T) *fakeHost {
	t.Helper()
	if _, err := exec.LookPath("blkid"); err != nil {
		t.Skip("blkid is not installed")
	}
	root := t.TempDir()
	h := &fakeHost{t: t, dev: filepath.Join(root, "dev"), sys: filepath.Join(root, "sys"), log: filepath.Join(root, "mdadm.log"), env: map[string]string{}}

	// The array device: a real block device node 9:127 in the fake /dev.
	if err := os.MkdirAll(h.dev, 0o755); err != nil {
		t.Fatal(err)
	}
	if err := unix.Mknod(filepath.Join(h.dev, "md127"), unix.S_IFBLK|0o600, int(unix.Mkdev(9, 127))); err != nil {
		t.Skipf("cannot make a block device node here: %v", err)
	}
	md := filepath.Join(h.sys, "devices", "virtual", "block", "md127")
	h.write(filepath.Join(md, "dev"), "9:127\n")
	h.write(filepath.Join(md, "size"), "41910272\n")
	h.write(filepath.Join(md, "md", "array_state"), "clean\n")
	h.write(filepath.Join(md, "md", "degraded"), "0\n")
	h.write(filepath.Join(md, "md", "sync_action"), "idle\n")
	for _, l := range []string{"class/block/md127", "dev/block/9:127"} {
		p := filepath.Join(h.sys, l)
		if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.Symlink("../../devices/virtual/block/md127", p); err != nil {
			t.Fatal(err)
		}
	}

	bin := filepath.Join(root, "bin")
	h.write(filepath.Join(bin, "mdadm"), fakeMdadm)
	if err := os.Chmod(filepath.Join(bin, "mdadm"), 0o755); err != nil {
		t.Fatal(err)
	}
	t.Setenv("PATH", bin+string(os.PathListSeparator)+os.Getenv("PATH"))

	for i := range 4 {
		p := filepath.Join(root, "hdd"+string(rune('0'+i))+".img")
		f, err := os.Create(p)
		if err != nil {
			t.Fatal(err)
		}
		if err := f.Truncate(8 << 20); err != nil {
			t.Fatal(err)
		}
		f.Close()
		h.member = append(h.member, p)
	}
	h.env["TC_LOG"] = h.log
	h.env["TC_STATE"] = filepath.Join(md, "md", "array_state")
	h.env["TC_DETAIL"] = fixture(t, "detail-export-raid10.txt")
	return h
}

func fixture(t *testing.T, name string) string {
	t.Helper()
	p, err := filepath.Abs(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return p
}

func (h *fakeHost) write(p, content string) {
	h.t.Helper()
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.WriteFile(p, []byte(content), 0o644); err != nil {
		h.t.Fatal(err)
	}
}

// manager returns a Manager wired to the fake host.
func (h *fakeHost) manager() Manager {
	var env []string
	for k, v := range h.env {
		env = append(env, k+"="+v)
	}
	return Manager{Runner: command.Runner{Env: env}, SysRoot: h.sys, devDir: h.dev}
}

// calls returns the mdadm invocations so far, one per line.
func (h *fakeHost) calls() []string {
	h.t.Helper()
	raw, err := os.ReadFile(h.log)
	if errors.Is(err, os.ErrNotExist) {
		return nil
	}
	if err != nil {
		h.t.Fatal(err)
	}
	return strings.Split(strings.TrimSuffix(string(raw), "\n"), "\n")
}

// link makes <dev>/md/<name> point at md127, as a running array has.
func (h *fakeHost) link(name string) string {
	h.t.Helper()
	p := filepath.Join(h.dev, "md", name)
	if err := os.MkdirAll(filepath.Dir(p), 0o755); err != nil {
		h.t.Fatal(err)
	}
	if err := os.Symlink("../md127", p); err != nil {
		h.t.Fatal(err)
	}
	return p
}

func TestCreate(t *testing.T) {
	h := newFakeHost(t)
	m := h.manager()
	a, err := m.Create(context.Background(), CreateOptions{
		Name: "tc-origin", Level: "10", Devices: h.member, Chunk: "512K", Layout: "n2", AssumeClean: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	target := filepath.Join(h.dev, "md", "tc-origin")
	want := Array{
		Path: target, Device: filepath.Join(h.dev, "md127"), Name: "tc-origin",
		UUID: "3b2a4c1e:8f0d2b6a:5c7e9d10:2f4a6b8c", Level: "10", RaidDevices: 4,
		State: "clean", SyncAction: "idle",
		Devices:   []string{"/dev/vdb", "/dev/vdc", "/dev/vdd", "/dev/vde"},
		SizeBytes: 41910272 * 512,
	}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("Create =\n%+v\nwant\n%+v", a, want)
	}
	calls := h.calls()
	wantCreate := "--create " + target + " --run --metadata=1.2 --homehost=any --name=tc-origin --level=10 --raid-devices=4 --chunk=512K --layout=n2 --assume-clean " + strings.Join(h.member, " ")
	if len(calls) != 2 || calls[0] != wantCreate || calls[1] != "--detail --export "+target {
		t.Errorf("mdadm calls:\n%s\nwant\n%s\n--detail --export %s", strings.Join(calls, "\n"), wantCreate, target)
	}

	// The name is taken now.
	_, err = m.Create(context.Background(), CreateOptions{Name: "tc-origin", Level: "1", Devices: h.member[:2]})
	if !errors.Is(err, ErrExists) {
		t.Errorf("second Create = %v, want ErrExists", err)
	}
}

func TestCreateRefuses(t *testing.T) {
	tests := []struct {
		name  string
		setup func(h *fakeHost) CreateOptions
		is    error
		want  string
	}{
		{
			name: "invalid options",
			setup: func(h *fakeHost) CreateOptions {
				return CreateOptions{Name: "o", Level: "10", Devices: h.member[:3]}
			},
			want: "create md array o: RAID10 needs an even number of at least 4 devices, got 3",
		},
		{
			name: "same device twice through a symlink",
			setup: func(h *fakeHost) CreateOptions {
				alias := filepath.Join(filepath.Dir(h.member[0]), "by-id-hdd0")
				if err := os.Symlink(h.member[0], alias); err != nil {
					t.Fatal(err)
				}
				return CreateOptions{Name: "o", Level: "1", Devices: []string{h.member[0], alias}}
			},
			want: "are the same device",
		},
		{
			name: "missing device",
			setup: func(h *fakeHost) CreateOptions {
				return CreateOptions{Name: "o", Level: "1", Devices: []string{h.member[0], "/dev/vdz-tc-missing"}}
			},
			is:   os.ErrNotExist,
			want: "device /dev/vdz-tc-missing does not exist",
		},
		{
			name: "member holds a filesystem",
			setup: func(h *fakeHost) CreateOptions {
				mkfs(t, h.member[1])
				return CreateOptions{Name: "o", Level: "1", Devices: h.member[:2]}
			},
			is:   ErrDeviceHasData,
			want: `holds ext4 (filesystem, label "old"): device holds data (set Force to overwrite it)`,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newFakeHost(t)
			o := tt.setup(h)
			_, err := h.manager().Create(context.Background(), o)
			if err == nil || !strings.Contains(err.Error(), tt.want) {
				t.Fatalf("Create = %v, want error containing %q", err, tt.want)
			}
			if tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
			}
			if calls := h.calls(); len(calls) != 0 {
				t.Errorf("mdadm ran: %q", calls)
			}
		})
	}
}

func mkfs(t *testing.T, img string) {
	t.Helper()
	if _, err := exec.LookPath("mkfs.ext4"); err != nil {
		t.Skip("mkfs.ext4 is not installed")
	}
	if out, err := exec.Command("mkfs.ext4", "-q", "-F", "-L", "old", img).CombinedOutput(); err != nil {
		t.Fatalf("mkfs.ext4: %v: %s", err, out)
	}
}

func TestCreateForce(t *testing.T) {
	h := newFakeHost(t)
	mkfs(t, h.member[1])
	h.env["TC_DETAIL"] = fixture(t, "detail-export-raid1-degraded.txt")
	a, err := h.manager().Create(context.Background(), CreateOptions{Name: "tc-db-wc", Level: "1", Devices: h.member[:2], Force: true})
	if err != nil {
		t.Fatal(err)
	}
	if a.Level != "1" || a.UUID != "9e0c7a51:44d2b8f3:0a6e1c9d:7b3f5e21" {
		t.Errorf("Create = %+v", a)
	}
	if calls := h.calls(); len(calls) != 2 || strings.Contains(calls[0], "--force") || !strings.HasPrefix(calls[0], "--create ") {
		t.Errorf("mdadm calls: %q", calls)
	}
}

func TestCreateMdadmFails(t *testing.T) {
	h := newFakeHost(t)
	h.env["TC_FAIL"] = "--create"
	_, err := h.manager().Create(context.Background(), CreateOptions{Name: "o", Level: "1", Devices: h.member[:2]})
	var ee *command.ExitError
	if !errors.As(err, &ee) || ee.Code != 1 || !strings.Contains(err.Error(), "Device or resource busy") {
		t.Fatalf("Create = %v, want mdadm's ExitError", err)
	}
}

func TestDetail(t *testing.T) {
	h := newFakeHost(t)
	h.env["TC_DETAIL"] = fixture(t, "detail-export-raid1-degraded.txt")
	md := filepath.Join(h.sys, "devices", "virtual", "block", "md127")
	h.write(filepath.Join(md, "md", "array_state"), "active\n")
	h.write(filepath.Join(md, "md", "degraded"), "1\n")
	h.write(filepath.Join(md, "md", "sync_action"), "recover\n")

	path := filepath.Join(h.dev, "md127")
	a, err := h.manager().Detail(context.Background(), path)
	if err != nil {
		t.Fatal(err)
	}
	want := Array{
		Path: path, Device: path, Name: "tc-db-wc",
		UUID: "9e0c7a51:44d2b8f3:0a6e1c9d:7b3f5e21", Level: "1", RaidDevices: 2,
		State: "active", Degraded: 1, SyncAction: "recover",
		Devices: []string{"/dev/dm-4"}, Spares: []string{"/dev/nvme1n1"},
		SizeBytes: 41910272 * 512,
	}
	if !reflect.DeepEqual(a, want) {
		t.Errorf("Detail =\n%+v\nwant\n%+v", a, want)
	}

	// No md attributes: not an array the kernel runs.
	if err := os.RemoveAll(filepath.Join(md, "md")); err != nil {
		t.Fatal(err)
	}
	if _, err := h.manager().Detail(context.Background(), path); err == nil {
		t.Error("Detail without md/array_state: no error")
	}
	// Not there at all.
	_, err = h.manager().Detail(context.Background(), filepath.Join(h.dev, "md", "nope"))
	var ee *command.ExitError
	if !errors.As(err, &ee) {
		t.Errorf("Detail of a missing array = %v, want *command.ExitError", err)
	}
}

// scanFile writes an mdadm scan output with the fake /dev in its paths.
func (h *fakeHost) scanFile(name, content string) string {
	p := filepath.Join(filepath.Dir(h.log), name)
	h.write(p, strings.ReplaceAll(content, "/dev/", h.dev+"/"))
	return p
}

func TestAssembleByUUID(t *testing.T) {
	const uuid = "3b2a4c1e:8f0d2b6a:5c7e9d10:2f4a6b8c"
	tests := []struct {
		name      string
		uuid      string
		arrayName string
		scan      string // mdadm --detail --scan
		examine   string // mdadm --examine --scan
		links     []string
		state     string // array_state before assembly
		noStart   bool   // assembly leaves the array inactive
		want      []string
		wantErr   string
		is        error
	}{
		{
			name: "already running", uuid: uuid, arrayName: "tc-origin",
			scan:  "ARRAY /dev/md/tc-origin metadata=1.2 name=any:tc-origin UUID=" + uuid + "\n",
			links: []string{"tc-origin"},
			want:  []string{"--detail --scan", "--detail --export /dev/md/tc-origin"},
		},
		{
			name: "running under another name, UUID in upper case", uuid: strings.ToUpper(uuid), arrayName: "wanted",
			scan:  "ARRAY /dev/md/tc-origin metadata=1.2 name=any:tc-origin UUID=" + uuid + "\n",
			links: []string{"tc-origin"},
			want:  []string{"--detail --scan", "--detail --export /dev/md/tc-origin"},
		},
		{
			name: "not running", uuid: uuid, arrayName: "tc-origin",
			scan: "ARRAY /dev/md/other metadata=1.2 name=any:other UUID=0f1e2d3c:4b5a6978:8796a5b4:c3d2e1f0\n",
			want: []string{
				"--detail --scan",
				"--assemble /dev/md/tc-origin --run --config=partitions --uuid=" + uuid,
				"--detail --export /dev/md/tc-origin",
			},
		},
		{
			name: "inactive leftover is stopped first", uuid: uuid, arrayName: "tc-origin",
			scan:  "INACTIVE-ARRAY /dev/md/tc-origin metadata=1.2 name=any:tc-origin UUID=" + uuid + "\n",
			links: []string{"tc-origin"},
			state: "inactive",
			want: []string{
				"--detail --scan",
				"--detail --export /dev/md/tc-origin",
				"--stop /dev/md/tc-origin",
				"--assemble /dev/md/tc-origin --run --config=partitions --uuid=" + uuid,
				"--detail --export /dev/md/tc-origin",
			},
		},
		{
			name: "assembled but not started", uuid: uuid, arrayName: "tc-origin",
			state: "inactive", noStart: true,
			want: []string{
				"--detail --scan",
				"--assemble /dev/md/tc-origin --run --config=partitions --uuid=" + uuid,
				"--detail --export /dev/md/tc-origin",
			},
			wantErr: "was assembled but did not start",
		},
		{
			name: "name from the superblock", uuid: uuid,
			examine: "ARRAY /dev/md/tc-origin  metadata=1.2 UUID=" + uuid + " name=any:tc-origin\n",
			want: []string{
				"--detail --scan",
				"--examine --scan --config=partitions",
				"--assemble /dev/md/tc-origin --run --config=partitions --uuid=" + uuid,
				"--detail --export /dev/md/tc-origin",
			},
		},
		{
			name: "no member found", uuid: uuid,
			want:    []string{"--detail --scan", "--examine --scan --config=partitions"},
			wantErr: "no member device of md array " + uuid + " found",
		},
		{
			name: "name taken by another array", uuid: uuid, arrayName: "tc-origin",
			scan:    "ARRAY /dev/md/tc-origin metadata=1.2 name=any:tc-origin UUID=0f1e2d3c:4b5a6978:8796a5b4:c3d2e1f0\n",
			want:    []string{"--detail --scan"},
			wantErr: "name tc-origin is used by array 0f1e2d3c:4b5a6978:8796a5b4:c3d2e1f0",
			is:      ErrExists,
		},
		{
			name: "bad UUID", uuid: "3b2a4c1e-8f0d-2b6a-5c7e-9d102f4a6b8c", arrayName: "tc-origin",
			wantErr: "is not of the form",
		},
		{
			name: "bad name", uuid: uuid, arrayName: "../etc",
			wantErr: "array name",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			h := newFakeHost(t)
			if tt.scan != "" {
				h.env["TC_SCAN"] = h.scanFile("scan", tt.scan)
			}
			if tt.examine != "" {
				h.env["TC_EXAMINE"] = h.scanFile("examine", tt.examine)
			}
			if tt.noStart {
				h.env["TC_STATE"] = os.DevNull
			}
			for _, l := range tt.links {
				h.link(l)
			}
			if tt.state != "" {
				h.write(filepath.Join(h.sys, "devices", "virtual", "block", "md127", "md", "array_state"), tt.state+"\n")
			}
			a, err := h.manager().AssembleByUUID(context.Background(), tt.uuid, tt.arrayName)
			calls := strings.ReplaceAll(strings.Join(h.calls(), "\n"), h.dev+"/", "/dev/")
			if calls != strings.Join(tt.want, "\n") {
				t.Errorf("mdadm calls:\n%s\nwant\n%s", calls, strings.Join(tt.want, "\n"))
			}
			if tt.wantErr != "" {
				if err == nil || !strings.Contains(err.Error(), tt.wantErr) {
					t.Fatalf("AssembleByUUID = %v, want error containing %q", err, tt.wantErr)
				}
				if tt.is != nil && !errors.Is(err, tt.is) {
					t.Errorf("errors.Is(%v, %v) = false", err, tt.is)
				}
				return
			}
			if err != nil {
				t.Fatal(err)
			}
			if a.UUID != uuid || a.Path != filepath.Join(h.dev, "md", "tc-origin") || a.Device != filepath.Join(h.dev, "md127") || a.State != "clean" {
				t.Errorf("AssembleByUUID = %+v", a)
			}
		})
	}
}

func TestStop(t *testing.T) {
	h := newFakeHost(t)
	m := h.manager()
	if err := m.Stop(context.Background(), filepath.Join(h.dev, "md", "gone")); err != nil {
		t.Errorf("Stop of a stopped array = %v", err)
	}
	if calls := h.calls(); len(calls) != 0 {
		t.Errorf("mdadm ran for a missing array: %q", calls)
	}

	p := h.link("tc-origin")
	if err := m.Stop(context.Background(), p); err != nil {
		t.Fatal(err)
	}
	if calls := h.calls(); len(calls) != 1 || calls[0] != "--stop "+p {
		t.Errorf("mdadm calls: %q", calls)
	}

	h.link("busy")
	h.env["TC_FAIL"] = "--stop"
	err := h.manager().Stop(context.Background(), filepath.Join(h.dev, "md", "busy"))
	var ee *command.ExitError
	if !errors.As(err, &ee) {
		t.Errorf("Stop of a busy array = %v, want *command.ExitError", err)
	}
}
