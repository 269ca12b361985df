// SPDX-License-Identifier: Apache-2.0

package cli

import (
	"errors"
	"fmt"
	"io/fs"
	"os"
	"strings"

	"github.com/spf13/pflag"
	"sigs.k8s.io/yaml"
)

// Where tidectl finds the cluster when --etcd-endpoints is not given, so
// that an operator does not repeat four flags on every call: the
// environment (TIDECACHE_ETCD_ENDPOINTS, _CERT, _KEY, _CA, _PREFIX, _USER,
// _PASSWORD_FILE, _AUTH_DIR), then a
// config file (TIDECACHE_CONFIG, else DefaultConfigFile). A flag wins over
// the environment, which wins over the file, setting by setting.
//
// Endpoints from the environment or the file select cluster mode for the
// commands that work both ways; the commands that only work on this
// node's devices (pool, flush, check, tune...) still run locally, as they
// refuse only an explicit --etcd-endpoints.

// DefaultConfigFile is tidectl's config file when TIDECACHE_CONFIG is not
// set. It is optional.
const DefaultConfigFile = "/etc/tidecache/tidectl.yaml"

// ConfigFileEnv names another config file.
const ConfigFileEnv = "TIDECACHE_CONFIG"

// fileConfig is the config file's content, e.g.
//
//	etcdEndpoints: [https://10.0.0.1:2379, https://10.0.0.2:2379]
//	etcdCert: /etc/tidecache/admin.crt
//	etcdKey: /etc/tidecache/admin.key
//	etcdCA: /etc/tidecache/ca.crt
//
// or, for an etcd with password authentication,
//
//	etcdUser: ops
//	etcdPasswordFile: /etc/tidecache/ops.password
type fileConfig struct {
	EtcdEndpoints    []string `json:"etcdEndpoints"`
	EtcdCert         string   `json:"etcdCert"`
	EtcdKey          string   `json:"etcdKey"`
	EtcdCA           string   `json:"etcdCA"`
	EtcdPrefix       string   `json:"etcdPrefix"`
	EtcdUser         string   `json:"etcdUser"`
	EtcdPasswordFile string   `json:"etcdPasswordFile"`
	EtcdAuthDir      string   `json:"etcdAuthDir"`
}

// resolveCluster fills the cluster settings not given as flags from the
// environment and the config file, and records where the endpoints came
// from (clusterFlags.source).
func (g *Globals) resolveCluster(flags *pflag.FlagSet) error {
	getenv := g.getenv
	if getenv == nil {
		getenv = os.Getenv
	}
	path, explicit := getenv(ConfigFileEnv), true
	if path == "" {
		path, explicit = DefaultConfigFile, false
	}
	var fc fileConfig
	b, err := os.ReadFile(path)
	switch {
	case err == nil:
		if err := yaml.UnmarshalStrict(b, &fc); err != nil {
			return usageErrorf("config file %s: %v (keys: etcdEndpoints, etcdCert, etcdKey, etcdCA, etcdPrefix, etcdUser, etcdPasswordFile, etcdAuthDir)", path, err)
		}
	case errors.Is(err, fs.ErrNotExist) && !explicit:
	default:
		return usageErrorf("config file %s (%s): %v", path, ConfigFileEnv, err)
	}
	g.cl.source = "--etcd-endpoints"
	for _, s := range []struct {
		flag, env string
		dst       *string
		file      string
	}{
		{"etcd-endpoints", "TIDECACHE_ETCD_ENDPOINTS", &g.cl.endpoints, strings.Join(fc.EtcdEndpoints, ",")},
		{"etcd-cert", "TIDECACHE_ETCD_CERT", &g.cl.cert, fc.EtcdCert},
		{"etcd-key", "TIDECACHE_ETCD_KEY", &g.cl.key, fc.EtcdKey},
		{"etcd-ca", "TIDECACHE_ETCD_CA", &g.cl.ca, fc.EtcdCA},
		{"etcd-prefix", "TIDECACHE_ETCD_PREFIX", &g.cl.prefix, fc.EtcdPrefix},
		{"etcd-user", "TIDECACHE_ETCD_USER", &g.cl.user, fc.EtcdUser},
		{"etcd-password-file", "TIDECACHE_ETCD_PASSWORD_FILE", &g.cl.passwordFile, fc.EtcdPasswordFile},
		{"etcd-auth-dir", "TIDECACHE_ETCD_AUTH_DIR", &g.cl.authDir, fc.EtcdAuthDir},
	} {
		if flags != nil && flags.Changed(s.flag) {
			continue
		}
		from := ""
		if v := getenv(s.env); v != "" {
			*s.dst, from = v, s.env
		} else if s.file != "" {
			*s.dst, from = s.file, path
		}
		if s.flag == "etcd-endpoints" && from != "" {
			g.cl.source = from
		}
	}
	return nil
}

// clusterExplicit reports whether cluster mode was asked for on the
// command line (and not only configured).
func (g *Globals) clusterExplicit() bool {
	return g.cluster() && g.cl.source == "--etcd-endpoints"
}

// describeEndpoints names the endpoints and where they came from, for
// errors.
func (g *Globals) describeEndpoints() string {
	if g.cl.source == "" || g.cl.source == "--etcd-endpoints" {
		return g.cl.endpoints
	}
	return fmt.Sprintf("%s (from %s)", g.cl.endpoints, g.cl.source)
}
