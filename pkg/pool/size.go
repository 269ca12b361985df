// SPDX-License-Identifier: Apache-2.0

package pool

import (
	"strconv"
)

// CheckMemberSize returns an error wrapping ErrTooSmall, naming the device
// and both sizes, when an SSD is too small to join a pool.
func CheckMemberSize(path string, sizeBytes uint64) error {
	if sizeBytes < MinMemberBytes {
		return errorf(ErrTooSmall, "SSD %s is too small: it has %s, a pool member needs at least %s",
			path, FormatBytes(sizeBytes), FormatBytes(MinMemberBytes))
	}
	return nil
}

// CheckOriginSize returns an error wrapping ErrTooSmall, naming the device
// and both sizes, when a device is too small to be a pool's origin.
func CheckOriginSize(path string, sizeBytes uint64) error {
	if sizeBytes < MinOriginBytes {
		return errorf(ErrTooSmall, "origin %s is too small: it has %s, a pool origin needs at least %s",
			path, FormatBytes(sizeBytes), FormatBytes(MinOriginBytes))
	}
	return nil
}

// ReadMetaSectors returns the size of the dm-cache metadata slice for a
// read cache of the given size, both in sectors:
//
//	max(8 MiB, 4 MiB + 16 B * readCacheSectors/64), rounded up to Alignment
//
// that is 4 MiB plus 16 bytes per 32 KiB cache block, at least
// MinReadMetaBytes. A 100 GiB read cache gets a 54 MiB metadata slice.
func ReadMetaSectors(readCacheSectors uint64) uint64 {
	blocks := ceilDiv(readCacheSectors, ReadMetaBlockSectors)
	bytes := uint64(ReadMetaBaseBytes) + blocks*ReadMetaBytesPerBlock
	bytes = max(bytes, MinReadMetaBytes)
	return alignUp(ceilDiv(bytes, SectorSize))
}

// BytesToSectors converts a byte count to sectors, rounded up to Alignment.
func BytesToSectors(b uint64) uint64 { return alignUp(ceilDiv(b, SectorSize)) }

func ceilDiv(a, b uint64) uint64 {
	q := a / b
	if a%b != 0 {
		q++
	}
	return q
}

// alignUp rounds sectors up to Alignment. Callers pass sector counts
// derived from byte counts, far below the overflow point.
func alignUp(s uint64) uint64 { return ceilDiv(s, Alignment) * Alignment }

func alignDown(s uint64) uint64 { return s / Alignment * Alignment }

// FormatBytes renders a byte count for messages in binary units: as a
// whole number in the largest unit that shows it exactly with at most five
// digits ("512 B", "16 MiB", "1536 MiB", "10236 MiB"), else with one decimal
// in the largest unit ("1.0 GiB" for one byte more than 1 GiB).
func FormatBytes(b uint64) string {
	units := []string{"B", "KiB", "MiB", "GiB", "TiB", "PiB", "EiB"}
	top := 0
	for n := b; n >= 1024 && top < len(units)-1; n /= 1024 {
		top++
	}
	for u := top; u >= 0; u-- {
		div := uint64(1) << (10 * u)
		if b%div == 0 && b/div < 100000 {
			return strconv.FormatUint(b/div, 10) + " " + units[u]
		}
	}
	return strconv.FormatFloat(float64(b)/float64(uint64(1)<<(10*top)), 'f', 1, 64) + " " + units[top]
}

func formatSectors(s uint64) string { return FormatBytes(s * SectorSize) }
