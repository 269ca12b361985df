// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"crypto/sha256"
	"errors"
	"fmt"
	"net"
	"path/filepath"
	"slices"
	"strconv"
	"strings"

	"github.com/tidecache/tidecache/tests/vm/harness/internal/wire"
)

// launch is everything one qemu command line is made of, resolved.
type launch struct {
	name       string
	kernel     string // vmlinuz path
	initrd     string
	appendLine string
	cpus       int
	memoryMiB  int
	consoleLog string // ttyS0
	ackLog     string // ttyS1
	ctlSocket  string // virtio-serial control channel, qemu is the server
	qmpSocket  string // QMP, for the host I/O errors of disks (hostio.go)
	disks      []Disk
	netConnect string // address of the VM's network link (see network.go)
	mac        string
}

// qemuArgs builds the qemu-system-x86_64 arguments. -nodefaults keeps qemu
// from adding its default NIC (user-mode networking would give the guest a
// way out of this machine) and monitor; stdio is not used.
//
// The CPU model is Westmere, not max: with max the guests take code paths
// (AVX2 and more) that TCG emulates slowly. Measured in one VM, three
// models one after the other: pool create 2.0 s under Westmere, 1.8 s
// under qemu64, 2.5 s under max; volume create 0.9, 0.8 and 1.2 s; md5sum
// of 64 MiB 0.5, 0.5 and 1.2 s. Turning AVX off in max gains only part of
// that. Not qemu64, though a little faster: one guest of a CI run under it
// spun in blkid for 20 minutes (soft lockup). qemu64 lacks CMPXCHG16B,
// without which the kernel takes other locking paths (SLUB's bit spinlock
// among them): the likely cause. Westmere has CX16, SSE4.2 and POPCNT.
// Nothing the tests run needs more than the x86-64 baseline Debian builds
// for.
func (l launch) qemuArgs() []string {
	args := []string{
		"-name", "tc-" + l.name,
		"-nodefaults", "-no-user-config", "-display", "none",
		"-accel", "tcg,thread=multi", "-cpu", "Westmere",
		"-smp", strconv.Itoa(l.cpus), "-m", strconv.Itoa(l.memoryMiB),
		"-no-reboot",
		"-kernel", l.kernel, "-initrd", l.initrd, "-append", l.appendLine,
		"-virtfs", "local,path=/,mount_tag=hostroot,security_model=none,readonly=on,multidevs=remap",
		// Entropy from the host (kernel/modules.txt, virtio_rng).
		"-device", "virtio-rng-pci",
		"-chardev", "file,id=console,path=" + qemuEscape(l.consoleLog),
		"-serial", "chardev:console",
		"-chardev", "file,id=ack,path=" + qemuEscape(l.ackLog),
		"-serial", "chardev:ack",
		"-device", "virtio-serial-pci,id=vser",
		"-chardev", "socket,id=ctl,path=" + qemuEscape(l.ctlSocket) + ",server=on,wait=off",
		"-device", "virtserialport,bus=vser.0,chardev=ctl,name=" + wire.PortName,
		"-qmp", "unix:" + qemuEscape(l.qmpSocket) + ",server=on,wait=off",
	}
	// A disk that shapes its queue or is an NVMe disk needs its own
	// -device; qemu creates the devices of if=virtio drives after every
	// -device, so then every disk gets one, in Config order, and the
	// guest names them vda, vdb... in that order as before.
	explicit := false
	for _, d := range l.disks {
		explicit = explicit || d.explicitDevice()
	}
	for i, d := range l.disks {
		file := qemuEscape(d.Path)
		if d.HostFaults != "" {
			file = "blkdebug:" + qemuEscape(d.HostFaults) + ":" + file
		}
		// A host error pauses the guest instead of failing its request
		// (see hostio.go); the id names the disk in qemu's events (with
		// if=none it is the block backend's name, which they carry too).
		id := "disk" + strconv.Itoa(i)
		iface := "virtio"
		if explicit {
			iface = "none"
		}
		cache := "none"
		if d.HostPageCache {
			cache = "writeback"
		}
		drive := "file=" + file + ",id=" + id + ",if=" + iface + ",format=raw,cache=" + cache + ",werror=stop,rerror=stop"
		if d.IOPSLimit > 0 {
			drive += ",throttling.iops-total=" + strconv.FormatInt(d.IOPSLimit, 10)
		}
		if d.BpsLimit > 0 {
			drive += ",throttling.bps-total=" + strconv.FormatInt(d.BpsLimit, 10)
		}
		args = append(args, "-drive", drive)
		if d.NVMe {
			args = append(args, "-device", "nvme,serial=tidecache"+strconv.Itoa(i)+",drive="+id)
			continue
		}
		if explicit {
			dev := "virtio-blk-pci,drive=" + id
			if d.Queues > 0 {
				dev += ",num-queues=" + strconv.Itoa(d.Queues)
			}
			if d.QueueSize > 0 {
				dev += ",queue-size=" + strconv.Itoa(d.QueueSize)
			}
			if d.QueueSize > 0 && d.QueueSize < 128 {
				// qemu ties the pages one request may carry to the
				// queue's size (QueueSize-2) unless told not to: 30 at
				// 32 entries, a fifth of what a SATA host adapter takes
				// (AHCI: 168). Off, it is 126, as with the default queue.
				dev += ",seg-max-adjust=off"
			}
			args = append(args, "-device", dev)
		}
	}
	if l.netConnect != "" {
		args = append(args, "-netdev", "socket,id=net0,connect="+l.netConnect,
			"-device", "virtio-net-pci,netdev=net0,mac="+l.mac)
	}
	return args
}

// qemuEscape escapes a value inside a qemu option list (commas double).
func qemuEscape(s string) string { return strings.ReplaceAll(s, ",", ",,") }

// kernelAppend builds the guest kernel command line; modules are .ko paths
// for the agent to insmod. mitigations=off matters under TCG: page-table
// isolation makes every guest syscall flush qemu's software TLB.
func kernelAppend(cfg Config, agent string, modules ...string) (string, error) {
	if strings.ContainsAny(agent, " \t\n\"") {
		return "", fmt.Errorf("agent path %q: the kernel command line cannot carry spaces or quotes", agent)
	}
	for _, m := range modules {
		if strings.ContainsAny(m, " \t\n\",") {
			return "", fmt.Errorf("module path %q: the kernel command line cannot carry spaces, quotes or commas", m)
		}
	}
	parts := []string{
		"console=ttyS0", "quiet", "panic=-1", "oops=panic", "mitigations=off",
		"rdinit=/init",
		wire.ParamAgent + "=" + agent,
		wire.ParamName + "=" + cfg.Name,
	}
	if cfg.Network != nil {
		parts = append(parts, wire.ParamAddr+"="+cfg.Network.Addr)
	}
	if len(modules) > 0 {
		parts = append(parts, wire.ParamInsmod+"="+strings.Join(modules, ","))
	}
	if cfg.Systemd != nil {
		if len(cfg.Disks) >= 26 {
			return "", fmt.Errorf("a systemd boot takes one disk after Config.Disks: at most 25 of them, got %d", len(cfg.Disks))
		}
		// The root disk is the virtio disk after Config.Disks.
		root := append(slices.Clone(cfg.Disks), Disk{})
		parts = append(parts, wire.ParamRoot+"="+guestDiskNames(root)[len(cfg.Disks)],
			"systemd.show_status=error")
		for _, u := range cfg.Systemd.Mask {
			parts = append(parts, "systemd.mask="+u)
		}
	}
	if cfg.ExtraAppend != "" {
		parts = append(parts, cfg.ExtraAppend)
	}
	line := strings.Join(parts, " ")
	// x86 COMMAND_LINE_SIZE.
	if len(line) >= 2048 {
		return "", fmt.Errorf("kernel command line is %d bytes, the limit is 2047", len(line))
	}
	return line, nil
}

// validate checks a network config and fills in its MAC address.
func (n *Network) validate(vmName string) (Network, error) {
	out := *n
	if _, _, err := net.ParseCIDR(n.Addr); err != nil {
		return out, fmt.Errorf("Network.Addr %q: want a CIDR such as 10.0.0.1/24: %w", n.Addr, err)
	}
	if (n.Listen == "") == (n.Connect == "") {
		return out, errors.New("Network: set exactly one of Listen and Connect")
	}
	hostport := n.Listen + n.Connect
	host, port, err := net.SplitHostPort(hostport)
	if err != nil {
		return out, fmt.Errorf("Network: %q: %w", hostport, err)
	}
	if p, err := strconv.Atoi(port); err != nil || p <= 0 || p > 65535 {
		return out, fmt.Errorf("Network: %q: bad port", hostport)
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		// The VM link is carried over a host TCP socket: keep it on loopback.
		return out, fmt.Errorf("Network: %q: the host side must be a loopback address such as 127.0.0.1", hostport)
	}
	if out.MAC == "" {
		sum := sha256.Sum256([]byte(vmName + "/" + n.Addr))
		out.MAC = fmt.Sprintf("52:54:00:%02x:%02x:%02x", sum[0], sum[1], sum[2])
	} else if hw, err := net.ParseMAC(out.MAC); err != nil || len(hw) != 6 {
		return out, fmt.Errorf("Network.MAC %q: want aa:bb:cc:dd:ee:ff", out.MAC)
	}
	return out, nil
}

// validName is what Config.Name may hold: it names files and the guest host.
func validName(s string) bool {
	if s == "" || len(s) > 48 || s != filepath.Base(s) || s[0] == '.' || s[0] == '-' {
		return false
	}
	for _, r := range s {
		if !(r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.') {
			return false
		}
	}
	return true
}
