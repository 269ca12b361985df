// SPDX-License-Identifier: Apache-2.0

package harness

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"debug/elf"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"os/exec"
	"path/filepath"
	"sync"
)

// Booting the compressed bzImage under TCG costs seconds before the kernel
// prints its first line: SeaBIOS, then the kernel decompressing itself in
// emulated code. qemu can instead load the uncompressed ELF vmlinux and
// enter it through its PVH entry point (a Xen ELF note, CONFIG_PVH=y in
// Debian's kernel), skipping both. kernelForBoot extracts that vmlinux once
// into the cache and falls back to the bzImage when it cannot.

// xenElfNotePhys32Entry is XEN_ELFNOTE_PHYS32_ENTRY, the PVH entry note.
const xenElfNotePhys32Entry = 18

var vmlinuxMu sync.Mutex

// kernelForBoot returns the image to give qemu's -kernel for k: the cached
// PVH vmlinux, or the bzImage (with the reason it is not the vmlinux). A
// path given in Config.Kernel or EnvKernel is used as it is.
func kernelForBoot(ctx context.Context, cacheDir string, k guestKernel) (path string, fallback error) {
	if k.asGiven {
		return k.image, nil
	}
	vmlinux, err := extractVmlinux(ctx, cacheDir, k.version, k.image)
	if err != nil {
		return k.image, err
	}
	return vmlinux, nil
}

func extractVmlinux(ctx context.Context, cacheDir, kver, bz string) (string, error) {
	vmlinuxMu.Lock()
	defer vmlinuxMu.Unlock()
	st, err := os.Stat(bz)
	if err != nil {
		return "", err
	}
	key := sha256.Sum256(fmt.Appendf(nil, "%s %d %d", bz, st.Size(), st.ModTime().UnixNano()))
	out := filepath.Join(cacheDir, fmt.Sprintf("vmlinux-%s-%s", kver, hex.EncodeToString(key[:])[:16]))
	if _, err := os.Stat(out); err == nil {
		return out, nil
	}
	data, err := os.ReadFile(bz)
	if err != nil {
		return "", err
	}
	payload, err := bzImagePayload(data)
	if err != nil {
		return "", fmt.Errorf("%s: %w", bz, err)
	}
	tmp, err := os.CreateTemp(cacheDir, ".vmlinux-*")
	if err != nil {
		return "", err
	}
	defer os.Remove(tmp.Name())
	err = decompress(ctx, payload, tmp)
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return "", fmt.Errorf("%s: decompress: %w", bz, err)
	}
	if err := checkPVH(tmp.Name()); err != nil {
		return "", fmt.Errorf("%s: %w", bz, err)
	}
	if err := os.Rename(tmp.Name(), out); err != nil {
		return "", err
	}
	return out, nil
}

// bzImagePayload returns the compressed kernel inside a bzImage, located by
// the boot protocol header (Documentation/arch/x86/boot.rst): setup_sects
// at 0x1f1, "HdrS" at 0x202, payload_offset and payload_length at 0x248,
// both relative to the protected-mode code that follows the setup sectors.
func bzImagePayload(b []byte) ([]byte, error) {
	if len(b) < 0x250 || string(b[0x202:0x206]) != "HdrS" {
		return nil, errors.New("not a bzImage (no HdrS header)")
	}
	if version := binary.LittleEndian.Uint16(b[0x206:]); version < 0x208 {
		return nil, fmt.Errorf("boot protocol %#x has no payload fields", version)
	}
	setupSects := int(b[0x1f1])
	if setupSects == 0 {
		setupSects = 4
	}
	start := (setupSects + 1) * 512
	off := int(binary.LittleEndian.Uint32(b[0x248:]))
	n := int(binary.LittleEndian.Uint32(b[0x24c:]))
	if off < 0 || n <= 0 || start+off+n > len(b) {
		return nil, fmt.Errorf("payload [%d+%d, %d bytes] outside the %d-byte image", start, off, n, len(b))
	}
	return b[start+off : start+off+n], nil
}

// decompress writes the decompressed payload to w: gzip in Go, xz and zstd
// with the host's xz and zstd tools. The kernel's build appends the
// uncompressed size (4 bytes, little-endian) to the compressed stream: gzip
// and xz are told to stop after one stream, and zstd, which has no such
// option and refuses the trailer, is given the stream without it.
func decompress(ctx context.Context, payload []byte, w io.Writer) error {
	var tool []string
	switch {
	case bytes.HasPrefix(payload, []byte{0x1f, 0x8b}):
		zr, err := gzip.NewReader(bytes.NewReader(payload))
		if err != nil {
			return err
		}
		zr.Multistream(false)
		_, err = io.Copy(w, zr)
		return err
	case bytes.HasPrefix(payload, []byte{0xfd, '7', 'z', 'X', 'Z', 0}):
		tool = []string{"xz", "-dc", "--single-stream"}
	case bytes.HasPrefix(payload, []byte{0x28, 0xb5, 0x2f, 0xfd}):
		tool = []string{"zstd", "-dc"}
		if len(payload) > 4 {
			payload = payload[:len(payload)-4]
		}
	default:
		return fmt.Errorf("unknown compression (magic % x)", payload[:min(6, len(payload))])
	}
	cmd := exec.CommandContext(ctx, tool[0], tool[1:]...)
	cmd.Stdin = bytes.NewReader(payload)
	cmd.Stdout = w
	var stderr bytes.Buffer
	cmd.Stderr = &stderr
	if err := cmd.Run(); err != nil {
		return fmt.Errorf("%s: %w: %s", tool[0], err, bytes.TrimSpace(stderr.Bytes()))
	}
	return nil
}

// checkPVH reports an error unless path is an x86-64 ELF with a PVH entry.
func checkPVH(path string) error {
	f, err := elf.Open(path)
	if err != nil {
		return err
	}
	defer f.Close()
	if f.Machine != elf.EM_X86_64 {
		return fmt.Errorf("vmlinux is for %v", f.Machine)
	}
	for _, p := range f.Progs {
		if p.Type != elf.PT_NOTE {
			continue
		}
		notes, err := io.ReadAll(p.Open())
		if err != nil {
			return err
		}
		for len(notes) >= 12 {
			namesz := int(binary.LittleEndian.Uint32(notes[0:]))
			descsz := int(binary.LittleEndian.Uint32(notes[4:]))
			typ := binary.LittleEndian.Uint32(notes[8:])
			name := notes[12:min(len(notes), 12+namesz)]
			if string(bytes.TrimRight(name, "\x00")) == "Xen" && typ == xenElfNotePhys32Entry {
				return nil
			}
			next := 12 + align4(namesz) + align4(descsz)
			if next > len(notes) {
				break
			}
			notes = notes[next:]
		}
	}
	return errors.New("vmlinux has no PVH entry note (CONFIG_PVH)")
}

func align4(n int) int { return (n + 3) &^ 3 }
