// SPDX-License-Identifier: Apache-2.0

package csi

import (
	"fmt"
	"math"
	"path"
	"sort"
	"strconv"
	"strings"

	"github.com/tidecache/tidecache/pkg/api"
	"github.com/tidecache/tidecache/pkg/pool"
)

// StorageClass parameter keys. Sizes are binary, as tidectl reads them:
// "16G", "16Gi" and "16GiB" all mean 16 GiB (parseBytes).
const (
	// ParamWriteCache is the write tier (dm-writecache) size; absent or
	// "0": none, and then mode cannot be writeback.
	ParamWriteCache = "writeCache"
	// ParamReadCache is the read tier (dm-cache) size; absent or "0":
	// none.
	ParamReadCache = "readCache"
	// ParamReadBlockSize is the read tier's block size (32Ki to 1Mi, a
	// power of two); needs readCache.
	ParamReadBlockSize = "readBlockSize"
	// ParamMode is writeback, writethrough or passthrough; absent: the
	// cluster policy's mode, else writeback with a write cache.
	ParamMode = "mode"
	// ParamProtect is none, local or peer; absent: the cluster's default
	// (docs/etcd-schema.md).
	ParamProtect = "protect"
	// ParamFSType is ext4 or xfs, the filesystem NodeStageVolume makes on
	// an empty volume when the volume capability names none.
	ParamFSType = "fsType"
	// ParamSharedOrigin is a node that exports shared devices (tidecached
	// run --export): each volume of the class caches one of them whole,
	// can fail over, and follows its pod to another node (see
	// createShared). Needs ParamExports and writeCache; protect is peer.
	ParamSharedOrigin = "sharedOrigin"
	// ParamExports is a pattern (path.Match: "pv-*", "lun[0-7]") of the
	// exports of ParamSharedOrigin the class may give to claims. It is
	// the administrator's word that their content may be replaced: the
	// node service makes a new filesystem over whatever a given export
	// held. No other export is ever taken.
	ParamExports = "exports"
)

// contextInstance is the volume context key CreateVolume sets on the
// volumes it makes: the etcd revision that created the volume's spec,
// which differs between two volumes of the same name and stays the same
// for the life of the PersistentVolume, whatever happens to the volume
// (a failover, a move) or to etcd. NodeStageVolume keys the filesystem it
// makes to it, and may wipe what an earlier volume left on the extent
// (see prepare). A statically provisioned PersistentVolume of an existing
// volume does not carry it, and nothing is ever wiped on it.
const contextInstance = "csi.tidecache.io/instance"

// kubernetesPrefix starts the parameters the external-provisioner adds
// or passes through for itself (csi.storage.k8s.io/fstype, the PVC's name
// with --extra-create-metadata): they are not tidecache's to refuse.
const kubernetesPrefix = "csi.storage.k8s.io/"

// The claim's namespace and name, which the external-provisioner adds
// with --extra-create-metadata (deploy/kubernetes/controller.yaml).
const (
	paramClaimName      = kubernetesPrefix + "pvc/name"
	paramClaimNamespace = kubernetesPrefix + "pvc/namespace"
)

// Filesystems NodeStageVolume makes.
const (
	fsExt4 = "ext4"
	fsXFS  = "xfs"
)

// defaultFSType is the filesystem made when neither the capability nor
// the parameters name one.
const defaultFSType = fsExt4

// Parameters are a StorageClass's parameters, checked.
type Parameters struct {
	// SharedOrigin is the exporting node of a class on shared origins,
	// Exports the pattern of the exports it may take; both empty
	// otherwise.
	SharedOrigin, Exports string
	WriteCacheBytes       uint64
	ReadCacheBytes        uint64
	ReadBlockSize         uint32
	Mode                  string
	Protect               string
	// FSType is empty when the parameters name none.
	FSType string
	// Claim is the PersistentVolumeClaim the volume is made for; nil
	// when the provisioner passed no claim metadata.
	Claim *api.Claim
}

// ParseParameters checks a StorageClass's parameters and reports every
// problem, each naming its key, wrapped in errInvalid.
func ParseParameters(in map[string]string) (Parameters, error) {
	var p Parameters
	var problems []string
	bad := func(format string, a ...any) { problems = append(problems, fmt.Sprintf(format, a...)) }
	keys := make([]string, 0, len(in))
	for k := range in {
		keys = append(keys, k)
	}
	sort.Strings(keys)
	for _, k := range keys {
		v := in[k]
		switch k {
		case ParamWriteCache, ParamReadCache:
			n, err := parseBytes(v)
			if err != nil {
				bad("%s %q: want a size such as 16Gi or 512Mi", k, v)
				break
			}
			if n > 0 && n < minCacheBytes(k) {
				bad("%s %s: below the minimum of %s", k, v, pool.FormatBytes(minCacheBytes(k)))
			}
			if k == ParamWriteCache {
				p.WriteCacheBytes = n
			} else {
				p.ReadCacheBytes = n
			}
		case ParamReadBlockSize:
			n, err := parseBytes(v)
			if err != nil || n > 1<<32-1 || !pool.ValidReadBlockSize(uint32(n)) {
				bad("%s %q: want a power of two from %s to %s, such as 256Ki", k, v,
					pool.FormatBytes(pool.MinReadBlockSize), pool.FormatBytes(pool.MaxReadBlockSize))
				break
			}
			p.ReadBlockSize = uint32(n)
		case ParamMode:
			if _, err := pool.ParseMode(v); err != nil {
				bad("%s %q: want writeback, writethrough or passthrough", k, v)
				break
			}
			p.Mode = v
		case ParamProtect:
			if _, err := pool.ParseProtection(v); err != nil {
				bad("%s %q: want none, local or peer", k, v)
				break
			}
			p.Protect = v
		case ParamFSType:
			if v != fsExt4 && v != fsXFS {
				bad("%s %q: want ext4 or xfs", k, v)
				break
			}
			p.FSType = v
		case ParamSharedOrigin:
			if err := api.ValidateNodeName(v); err != nil {
				bad("%s %q: want the name of the node that exports the devices: %v", k, v, err)
				break
			}
			p.SharedOrigin = v
		case ParamExports:
			if _, err := path.Match(v, ""); err != nil || v == "" {
				bad("%s %q: want a pattern of export names, such as pv-*", k, v)
				break
			}
			p.Exports = v
		default:
			if !strings.HasPrefix(k, kubernetesPrefix) {
				bad("unknown parameter %q: tidecache takes %s, %s, %s, %s, %s, %s, %s and %s", k,
					ParamWriteCache, ParamReadCache, ParamReadBlockSize, ParamMode, ParamProtect, ParamFSType, ParamSharedOrigin, ParamExports)
			}
		}
	}
	switch {
	case p.SharedOrigin != "" && p.Exports == "":
		bad("%s needs %s: the pattern of the exports whose content the class may replace", ParamSharedOrigin, ParamExports)
	case p.Exports != "" && p.SharedOrigin == "":
		bad("%s needs %s: the node that exports them", ParamExports, ParamSharedOrigin)
	case p.SharedOrigin != "" && p.WriteCacheBytes == 0:
		bad("%s needs %s: a volume on a shared origin fails over on the replica of its write cache", ParamSharedOrigin, ParamWriteCache)
	case p.SharedOrigin != "" && p.Protect != "" && p.Protect != string(pool.ProtectPeer):
		bad("%s mirrors the write cache to another node: %s %s would leave nothing to fail over to", ParamSharedOrigin, ParamProtect, p.Protect)
	case p.SharedOrigin != "":
		p.Protect = string(pool.ProtectPeer)
	}
	// The claim is metadata for dashboards, not a request: a volume is
	// made without it when the provisioner passed it incomplete.
	if c := (api.Claim{Namespace: in[paramClaimNamespace], Name: in[paramClaimName]}); c.Validate() == nil {
		p.Claim = &c
	}
	if p.ReadBlockSize != 0 && p.ReadCacheBytes == 0 {
		bad("%s needs %s", ParamReadBlockSize, ParamReadCache)
	}
	if p.Mode == string(pool.ModeWriteback) && p.WriteCacheBytes == 0 {
		bad("%s writeback needs %s", ParamMode, ParamWriteCache)
	}
	if p.Protect != "" && p.Protect != string(pool.ProtectNone) && p.WriteCacheBytes == 0 {
		bad("%s %s mirrors the write cache: it needs %s", ParamProtect, p.Protect, ParamWriteCache)
	}
	if len(problems) > 0 {
		return Parameters{}, errorf(errInvalid, "StorageClass parameters: %s", strings.Join(problems, "; "))
	}
	return p, nil
}

// shown prints a spec value for a message: a size in bytes as
// FormatBytes does, an empty string as "unset".
func shown(v any) string {
	switch v := v.(type) {
	case uint64:
		return pool.FormatBytes(v)
	case uint32:
		return pool.FormatBytes(uint64(v))
	case string:
		if v == "" {
			return "unset"
		}
		return v
	}
	return fmt.Sprint(v)
}

func minCacheBytes(key string) uint64 {
	if key == ParamWriteCache {
		return pool.MinWriteCacheBytes
	}
	return pool.MinReadCacheBytes
}

// parseBytes reads a whole number of bytes with an optional binary unit:
// K, M, G or T, alone or followed by i, B or iB ("64M", "64Mi", "64MiB";
// all 64 << 20), as tidectl and Kubernetes quantities write them.
func parseBytes(s string) (uint64, error) {
	s = strings.TrimSpace(s)
	i := strings.IndexFunc(s, func(r rune) bool { return r < '0' || r > '9' })
	digits, unit := s, ""
	if i >= 0 {
		digits, unit = s[:i], s[i:]
	}
	n, err := strconv.ParseUint(digits, 10, 64)
	if err != nil {
		return 0, fmt.Errorf("size %q: %w", s, err)
	}
	shift := 0
	if unit != "" {
		u := strings.TrimSuffix(strings.TrimSuffix(strings.ToUpper(unit), "B"), "I")
		j := strings.Index("KMGT", u)
		if len(u) != 1 || j < 0 {
			return 0, fmt.Errorf("size %q: unknown unit %q", s, unit)
		}
		shift = 10 * (j + 1)
	}
	if n > math.MaxUint64>>shift {
		return 0, fmt.Errorf("size %q: too large", s)
	}
	return n << shift, nil
}

// spec returns the volume spec these parameters ask for.
func (p Parameters) spec(name string, size uint64) api.VolumeSpec {
	return api.VolumeSpec{
		Name: name, SizeBytes: size,
		WriteCacheBytes: p.WriteCacheBytes, ReadCacheBytes: p.ReadCacheBytes, ReadBlockSize: p.ReadBlockSize,
		Mode: p.Mode, Protect: p.Protect, Claim: p.Claim,
	}
}

// mismatch says how an existing spec differs from what these parameters
// ask for, "" when it does not. The fields the cluster fills in for an
// empty parameter (node, pool, replica) are not compared.
func (p Parameters) mismatch(s api.VolumeSpec) string {
	var d []string
	diff := func(what string, have, want any) {
		if have != want {
			d = append(d, fmt.Sprintf("%s %s, asked %s", what, shown(have), shown(want)))
		}
	}
	diff(ParamWriteCache, s.WriteCacheBytes, p.WriteCacheBytes)
	diff(ParamReadCache, s.ReadCacheBytes, p.ReadCacheBytes)
	diff(ParamReadBlockSize, s.ReadBlockSize, p.ReadBlockSize)
	diff(ParamMode, s.Mode, p.Mode)
	diff(ParamProtect, s.Protect, p.Protect)
	origin := ""
	if o := s.SharedOrigin; o != nil {
		origin = o.Node
		if ok, _ := path.Match(p.Exports, o.Export); p.Exports != "" && !ok {
			d = append(d, fmt.Sprintf("export %s, outside %s %s", o.Export, ParamExports, p.Exports))
		}
	}
	diff(ParamSharedOrigin, origin, p.SharedOrigin)
	return strings.Join(d, ", ")
}
