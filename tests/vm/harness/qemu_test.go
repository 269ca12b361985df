// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"slices"
	"strings"
	"testing"
	"time"
)

func TestQemuArgs(t *testing.T) {
	l := launch{
		name: "n1", kernel: "/k", initrd: "/i", appendLine: "console=ttyS0",
		cpus: 2, memoryMiB: 1024,
		consoleLog: "/s/console.log", ackLog: "/s/a,b.log", ctlSocket: "/t/ctl.sock", qmpSocket: "/t/qmp.sock",
		disks: []Disk{
			{Path: "/d/ssd.img"},
			{Path: "/d/hdd,0.img", IOPSLimit: 150, BpsLimit: 200 << 20},
			{Path: "/d/bad.img", HostFaults: "/d/bad,rules"},
			{Path: "/d/log.img", HostPageCache: true},
		},
		netConnect: "127.0.0.1:5555", mac: "52:54:00:00:00:01",
	}
	args := l.qemuArgs()
	joined := strings.Join(args, " ")
	for _, want := range []string{
		"-nodefaults", "-accel tcg,thread=multi", "-cpu Westmere", "-smp 2", "-m 1024", "-no-reboot",
		"-kernel /k", "-initrd /i", "-append console=ttyS0",
		"-virtfs local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		"-chardev file,id=console,path=/s/console.log -serial chardev:console",
		"-chardev file,id=ack,path=/s/a,,b.log -serial chardev:ack",
		"-chardev socket,id=ctl,path=/t/ctl.sock,server=on,wait=off",
		"-device virtserialport,bus=vser.0,chardev=ctl,name=tc.ctl",
		"-qmp unix:/t/qmp.sock,server=on,wait=off",
		// Host errors pause the guest (hostio.go), and the ids name the
		// disks in qemu's events.
		"-drive file=/d/ssd.img,id=disk0,if=virtio,format=raw,cache=none,werror=stop,rerror=stop -drive",
		"-drive file=/d/hdd,,0.img,id=disk1,if=virtio,format=raw,cache=none,werror=stop,rerror=stop,throttling.iops-total=150,throttling.bps-total=209715200",
		"-drive file=blkdebug:/d/bad,,rules:/d/bad.img,id=disk2,",
		"-drive file=/d/log.img,id=disk3,if=virtio,format=raw,cache=writeback,werror=stop,rerror=stop -netdev",
		"-netdev socket,id=net0,connect=127.0.0.1:5555 -device virtio-net-pci,netdev=net0,mac=52:54:00:00:00:01",
	} {
		if !strings.Contains(joined, want) {
			t.Errorf("qemu args lack %q:\n%s", want, joined)
		}
	}
	// The console must be the first serial port (ttyS0), the ack file the second.
	if i, j := slices.Index(args, "chardev:console"), slices.Index(args, "chardev:ack"); i < 0 || j < i {
		t.Errorf("serial order: console at %d, ack at %d", i, j)
	}
	l.disks, l.netConnect = nil, ""
	joined = strings.Join(l.qemuArgs(), " ")
	if strings.Contains(joined, "-drive") || strings.Contains(joined, "-netdev") {
		t.Errorf("no disks, no network: %s", joined)
	}
}

// TestQemuArgsQueues: a disk that shapes its queue gets a -device of its
// own, and then every disk does, in Config order, so that the guest still
// names them vda, vdb... in that order; drive ids stay disk<i> for the
// host I/O watcher. Without queue fields the arguments are as before.
func TestQemuArgsQueues(t *testing.T) {
	base := launch{name: "q", kernel: "/k", initrd: "/i", cpus: 2, memoryMiB: 512,
		consoleLog: "/s/c", ackLog: "/s/a", ctlSocket: "/t/c", qmpSocket: "/t/q"}
	for name, tc := range map[string]struct {
		disks []Disk
		want  []string // the arguments after the QMP socket, as pairs
	}{
		"no queue fields: if=virtio as before": {
			disks: []Disk{{Path: "/d/a.img", IOPSLimit: 150}, {Path: "/d/b.img"}},
			want: []string{
				"-drive", "file=/d/a.img,id=disk0,if=virtio,format=raw,cache=none,werror=stop,rerror=stop,throttling.iops-total=150",
				"-drive", "file=/d/b.img,id=disk1,if=virtio,format=raw,cache=none,werror=stop,rerror=stop",
			},
		},
		"one shaped disk: every disk gets its device, in order": {
			disks: []Disk{{Path: "/d/hdd.img", IOPSLimit: 150, Queues: 1, QueueSize: 32}, {Path: "/d/ssd.img"}},
			want: []string{
				"-drive", "file=/d/hdd.img,id=disk0,if=none,format=raw,cache=none,werror=stop,rerror=stop,throttling.iops-total=150",
				"-device", "virtio-blk-pci,drive=disk0,num-queues=1,queue-size=32,seg-max-adjust=off",
				"-drive", "file=/d/ssd.img,id=disk1,if=none,format=raw,cache=none,werror=stop,rerror=stop",
				"-device", "virtio-blk-pci,drive=disk1",
			},
		},
		"a shaped disk after a plain one, a deep queue keeps qemu's segments": {
			disks: []Disk{{Path: "/d/a.img"}, {Path: "/d/b.img", QueueSize: 256}, {Path: "/d/c.img", Queues: 2}},
			want: []string{
				"-drive", "file=/d/a.img,id=disk0,if=none,format=raw,cache=none,werror=stop,rerror=stop",
				"-device", "virtio-blk-pci,drive=disk0",
				"-drive", "file=/d/b.img,id=disk1,if=none,format=raw,cache=none,werror=stop,rerror=stop",
				"-device", "virtio-blk-pci,drive=disk1,queue-size=256",
				"-drive", "file=/d/c.img,id=disk2,if=none,format=raw,cache=none,werror=stop,rerror=stop",
				"-device", "virtio-blk-pci,drive=disk2,num-queues=2",
			},
		},
	} {
		t.Run(name, func(t *testing.T) {
			l := base
			l.disks = tc.disks
			args := l.qemuArgs()
			i := slices.Index(args, "unix:/t/q,server=on,wait=off")
			if i < 0 {
				t.Fatalf("no QMP socket in %q", args)
			}
			if got := args[i+1:]; !slices.Equal(got, tc.want) {
				t.Errorf("disk arguments:\n got %q\nwant %q", got, tc.want)
			}
		})
	}
}

func TestDiskQueuesValidation(t *testing.T) {
	for _, d := range []Disk{{Queues: 1, QueueSize: 32}, {QueueSize: 4}, {QueueSize: 1024}, {Queues: 4}, {}} {
		d.Path = "x.img"
		if _, err := (Config{Disks: []Disk{d}}).withDefaults(); err != nil {
			t.Errorf("%+v refused: %v", d, err)
		}
	}
	for _, d := range []Disk{{QueueSize: 2}, {QueueSize: 48}, {QueueSize: 2048}, {Queues: -1}, {QueueSize: -32}, {Queues: 1025}} {
		d.Path = "x.img"
		if _, err := (Config{Disks: []Disk{d}}).withDefaults(); err == nil {
			t.Errorf("%+v accepted", d)
		}
	}
}

func TestKernelAppend(t *testing.T) {
	cfg, err := Config{Name: "a", Network: &Network{Addr: "10.0.0.1/24", Listen: "127.0.0.1:4000"}, ExtraAppend: "loglevel=7"}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	line, err := kernelAppend(cfg, "/work/x/agent")
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"console=ttyS0", "panic=-1", "tc.agent=/work/x/agent", "tc.name=a", "tc.addr=10.0.0.1/24"} {
		if !slices.Contains(strings.Fields(line), want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	if !strings.HasSuffix(line, " loglevel=7") {
		t.Errorf("ExtraAppend not last: %q", line)
	}
	if _, err := kernelAppend(cfg, "/work/with space/agent"); err == nil {
		t.Error("agent path with a space accepted")
	}
	cfg.ExtraAppend = strings.Repeat("x", 2048)
	if _, err := kernelAppend(cfg, "/a"); err == nil {
		t.Error("over-long command line accepted")
	}
}

func TestKernelAppendSystemd(t *testing.T) {
	cfg, err := Config{
		Disks:   []Disk{{Path: "a.img"}, {Path: "b.img"}},
		Systemd: &SystemdBoot{RootImage: "root.img", Mask: []string{"mariadb.service", "prometheus.service"}},
	}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasPrefix(cfg.Systemd.RootImage, "/") {
		t.Errorf("root image path not made absolute: %s", cfg.Systemd.RootImage)
	}
	line, err := kernelAppend(cfg, "/work/x/agent")
	if err != nil {
		t.Fatal(err)
	}
	// The root disk comes after the two others: vdc.
	for _, want := range []string{"tc.root=vdc", "systemd.mask=mariadb.service", "systemd.mask=prometheus.service"} {
		if !slices.Contains(strings.Fields(line), want) {
			t.Errorf("%q lacks %q", line, want)
		}
	}
	// NVMe disks take no virtio name: after a.img, an NVMe disk and
	// b.img, the root disk is vdc still.
	withNVMe := cfg
	withNVMe.Disks = []Disk{{Path: "a.img"}, {Path: "n.img", NVMe: true}, {Path: "b.img"}}
	if line, err := kernelAppend(withNVMe, "/work/x/agent"); err != nil || !slices.Contains(strings.Fields(line), "tc.root=vdc") {
		t.Errorf("with an NVMe disk: %q (%v), want tc.root=vdc", line, err)
	}
	cfg.Systemd = nil
	if line, _ := kernelAppend(cfg, "/a"); strings.Contains(line, "tc.root=") {
		t.Errorf("a bare agent boot names a root disk: %q", line)
	}
}

func TestConfigDefaults(t *testing.T) {
	cfg, err := Config{Disks: []Disk{{Path: "rel.img", Size: 1}}}.withDefaults()
	if err != nil {
		t.Fatal(err)
	}
	if cfg.Name != "vm" || cfg.MemoryMiB != 2048 || cfg.CPUs != 2 || cfg.Logger == nil || cfg.HostIOErrorWait != time.Minute ||
		cfg.CommandTimeout != DefaultCommandTimeout {
		t.Errorf("defaults: %+v", cfg)
	}
	if !strings.HasPrefix(cfg.Disks[0].Path, "/") {
		t.Errorf("disk path not made absolute: %s", cfg.Disks[0].Path)
	}
	for _, bad := range []Config{
		{Name: "a/b"},
		{Name: "-x"},
		{Name: strings.Repeat("n", 49)},
		{MemoryMiB: 100},
		{Disks: []Disk{{}}},
		{Disks: []Disk{{Path: "x", Size: -1}}},
		{HostIOErrorWait: -time.Second},
		{CommandTimeout: -time.Second},
		{Disks: []Disk{{Path: "x", HostFaults: "a:b"}}},
		{Disks: []Disk{{Path: "x:y", HostFaults: "r"}}},
		{Network: &Network{Addr: "10.0.0.1", Listen: "127.0.0.1:1"}},
		{Network: &Network{Addr: "10.0.0.1/24"}},
		{Network: &Network{Addr: "10.0.0.1/24", Listen: "127.0.0.1:1", Connect: "127.0.0.1:1"}},
		{Network: &Network{Addr: "10.0.0.1/24", Listen: "192.168.1.1:4000"}},
		{Network: &Network{Addr: "10.0.0.1/24", Connect: "127.0.0.1:0"}},
		{Network: &Network{Addr: "10.0.0.1/24", Connect: "127.0.0.1:4000", MAC: "zz"}},
		{Systemd: &SystemdBoot{}},
		{Systemd: &SystemdBoot{RootImage: "r.img", Mask: []string{"a b.service"}}},
	} {
		if _, err := bad.withDefaults(); err == nil {
			t.Errorf("%+v accepted", bad)
		}
	}
}

func TestNetworkMAC(t *testing.T) {
	a, err := (&Network{Addr: "10.0.0.1/24", Listen: "127.0.0.1:4000"}).validate("a")
	if err != nil {
		t.Fatal(err)
	}
	b, err := (&Network{Addr: "10.0.0.2/24", Connect: "127.0.0.1:4000"}).validate("b")
	if err != nil {
		t.Fatal(err)
	}
	if a.MAC == b.MAC || !strings.HasPrefix(a.MAC, "52:54:00:") {
		t.Errorf("MACs %s and %s", a.MAC, b.MAC)
	}
	again, _ := (&Network{Addr: "10.0.0.1/24", Listen: "127.0.0.1:4000"}).validate("a")
	if again.MAC != a.MAC {
		t.Error("MAC not stable across boots")
	}
}
