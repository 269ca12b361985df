// SPDX-License-Identifier: Apache-2.0

// Package kubernetes holds the driver's Kubernetes manifests; its test
// checks them.
//
// Why not kubeconform: it validates against JSON schemas it downloads
// from the internet at run time, which this project's machines and CI
// cannot reach. Instead every document is decoded strictly (an unknown or
// misspelt field is an error, as is a malformed quantity or duration)
// into the Go types the API server itself decodes into: k8s.io/api for
// the built-in kinds, the Prometheus Operator's own API types for
// ServiceMonitor and PrometheusRule. The test then checks what a schema
// cannot: references between the documents, the StorageClass parameters
// (through the driver's own parser), and that the PrometheusRule carries
// exactly deploy/prometheus/tidecache-alerts.yml.
package kubernetes

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"path/filepath"
	"reflect"
	"regexp"
	"slices"
	"sort"
	"strings"
	"testing"

	monitoringv1 "github.com/prometheus-operator/prometheus-operator/pkg/apis/monitoring/v1"
	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	rbacv1 "k8s.io/api/rbac/v1"
	storagev1 "k8s.io/api/storage/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"sigs.k8s.io/yaml"

	"github.com/tidecache/tidecache/pkg/csi"
)

var update = flag.Bool("update", false, "rewrite prometheusrule.yaml from deploy/prometheus/tidecache-alerts.yml")

const (
	namespace      = "tidecache"
	alertsFile     = "../prometheus/tidecache-alerts.yml"
	ruleFile       = "prometheusrule.yaml"
	kustomizeFile  = "kustomization.yaml"
	containerImage = "tidecache-csi"
)

// kinds are the kinds the manifests may hold, with the type each decodes
// into and whether it lives in a namespace.
var kinds = map[string]struct {
	new        func() any
	namespaced bool
}{
	"v1/Namespace":       {func() any { return &corev1.Namespace{} }, false},
	"v1/ServiceAccount":  {func() any { return &corev1.ServiceAccount{} }, true},
	"v1/ConfigMap":       {func() any { return &corev1.ConfigMap{} }, true},
	"v1/Service":         {func() any { return &corev1.Service{} }, true},
	"apps/v1/Deployment": {func() any { return &appsv1.Deployment{} }, true},
	"apps/v1/DaemonSet":  {func() any { return &appsv1.DaemonSet{} }, true},
	"rbac.authorization.k8s.io/v1/ClusterRole":        {func() any { return &rbacv1.ClusterRole{} }, false},
	"rbac.authorization.k8s.io/v1/ClusterRoleBinding": {func() any { return &rbacv1.ClusterRoleBinding{} }, false},
	"rbac.authorization.k8s.io/v1/Role":               {func() any { return &rbacv1.Role{} }, true},
	"rbac.authorization.k8s.io/v1/RoleBinding":        {func() any { return &rbacv1.RoleBinding{} }, true},
	"storage.k8s.io/v1/CSIDriver":                     {func() any { return &storagev1.CSIDriver{} }, false},
	"storage.k8s.io/v1/StorageClass":                  {func() any { return &storagev1.StorageClass{} }, false},
	"monitoring.coreos.com/v1/ServiceMonitor":         {func() any { return &monitoringv1.ServiceMonitor{} }, true},
	"monitoring.coreos.com/v1/PrometheusRule":         {func() any { return &monitoringv1.PrometheusRule{} }, true},
}

// object is one decoded document.
type object struct {
	file string
	kind string // apiVersion/kind
	meta metav1.ObjectMeta
	obj  any
}

func (o object) String() string { return fmt.Sprintf("%s %s (%s)", o.kind, o.meta.Name, o.file) }

// kustomization is the part of kustomize's Kustomization this directory
// uses, decoded strictly as well.
type kustomization struct {
	APIVersion string   `json:"apiVersion"`
	Kind       string   `json:"kind"`
	Namespace  string   `json:"namespace"`
	Resources  []string `json:"resources"`
	Images     []struct {
		Name    string `json:"name"`
		NewName string `json:"newName,omitempty"`
		NewTag  string `json:"newTag"`
	} `json:"images"`
}

func TestManifests(t *testing.T) {
	objs, files := load(t)
	if len(objs) == 0 {
		t.Fatal("no manifests found")
	}
	byKind := map[string][]object{}
	for _, o := range objs {
		byKind[o.kind] = append(byKind[o.kind], o)
		if o.meta.Name == "" {
			t.Errorf("%s: no metadata.name", o)
		}
		switch ns := o.meta.Namespace; {
		case kinds[o.kind].namespaced && ns != namespace:
			t.Errorf("%s: namespace %q, want %q", o, ns, namespace)
		case !kinds[o.kind].namespaced && ns != "":
			t.Errorf("%s: cluster-scoped, but has namespace %q", o, ns)
		}
	}
	k := readKustomization(t)
	checkKustomization(t, k, files)
	checkDriver(t, byKind)
	checkWorkloads(t, byKind, k)
	checkRBAC(t, byKind)
	checkMonitoring(t, byKind)
}

// load decodes every document of every manifest strictly.
func load(t *testing.T) ([]object, []string) {
	t.Helper()
	files, err := filepath.Glob("*.yaml")
	if err != nil {
		t.Fatal(err)
	}
	var objs []object
	var manifests []string
	for _, f := range files {
		if f == kustomizeFile {
			continue
		}
		manifests = append(manifests, f)
		data, err := os.ReadFile(f)
		if err != nil {
			t.Fatal(err)
		}
		for i, doc := range splitDocuments(data) {
			o, err := decode(doc)
			if err != nil {
				t.Errorf("%s document %d: %v", f, i+1, err)
				continue
			}
			o.file = f
			objs = append(objs, o)
		}
	}
	return objs, manifests
}

// decode decodes one document strictly into the type of its kind.
func decode(doc []byte) (object, error) {
	var tm metav1.TypeMeta
	if err := yaml.Unmarshal(doc, &tm); err != nil {
		return object{}, err
	}
	kind := tm.APIVersion + "/" + tm.Kind
	k, ok := kinds[kind]
	if !ok {
		return object{}, fmt.Errorf("kind %s is not one the test knows; add its type", kind)
	}
	obj := k.new()
	if err := yaml.UnmarshalStrict(doc, obj); err != nil {
		return object{}, fmt.Errorf("%s: %w", kind, err)
	}
	if err := checkDurations(reflect.ValueOf(obj), kind); err != nil {
		return object{}, err
	}
	meta := reflect.ValueOf(obj).Elem().FieldByName("ObjectMeta").Interface().(metav1.ObjectMeta)
	return object{kind: kind, meta: meta, obj: obj}, nil
}

// operatorDuration is the CRD's validation pattern of the Prometheus
// Operator's Duration (its +kubebuilder:validation:Pattern marker), which
// the API server applies and the Go type, a string, does not.
var operatorDuration = regexp.MustCompile(`^(0|(([0-9]+)y)?(([0-9]+)w)?(([0-9]+)d)?(([0-9]+)h)?(([0-9]+)m)?(([0-9]+)s)?(([0-9]+)ms)?)$`)

// checkDurations walks a decoded object and checks every operator
// Duration in it against the CRD's pattern.
func checkDurations(v reflect.Value, where string) error {
	switch v.Kind() {
	case reflect.Pointer, reflect.Interface:
		if v.IsNil() {
			return nil
		}
		return checkDurations(v.Elem(), where)
	case reflect.Struct:
		for i := range v.NumField() {
			if err := checkDurations(v.Field(i), where+"."+v.Type().Field(i).Name); err != nil {
				return err
			}
		}
	case reflect.Slice, reflect.Array:
		for i := range v.Len() {
			if err := checkDurations(v.Index(i), fmt.Sprintf("%s[%d]", where, i)); err != nil {
				return err
			}
		}
	case reflect.String:
		if v.Type() == reflect.TypeFor[monitoringv1.Duration]() && !operatorDuration.MatchString(v.String()) {
			return fmt.Errorf("%s: duration %q does not match the CRD pattern %s", where, v.String(), operatorDuration)
		}
	}
	return nil
}

// splitDocuments splits a YAML stream at its "---" lines, dropping
// documents that hold only comments.
func splitDocuments(data []byte) [][]byte {
	var out [][]byte
	for _, doc := range regexp.MustCompile(`(?m)^---\s*$`).Split(string(data), -1) {
		empty := true
		for _, line := range strings.Split(doc, "\n") {
			if l := strings.TrimSpace(line); l != "" && !strings.HasPrefix(l, "#") {
				empty = false
			}
		}
		if !empty {
			out = append(out, []byte(doc))
		}
	}
	return out
}

func readKustomization(t *testing.T) kustomization {
	t.Helper()
	data, err := os.ReadFile(kustomizeFile)
	if err != nil {
		t.Fatal(err)
	}
	var k kustomization
	if err := yaml.UnmarshalStrict(data, &k); err != nil {
		t.Fatalf("%s: %v", kustomizeFile, err)
	}
	return k
}

// checkKustomization: it lists every manifest, and nothing else.
func checkKustomization(t *testing.T, k kustomization, files []string) {
	if k.APIVersion != "kustomize.config.k8s.io/v1beta1" || k.Kind != "Kustomization" {
		t.Errorf("%s: apiVersion/kind %s/%s", kustomizeFile, k.APIVersion, k.Kind)
	}
	res := slices.Clone(k.Resources)
	sort.Strings(res)
	if !slices.Equal(res, files) {
		t.Errorf("%s resources %v, want every manifest of the directory: %v", kustomizeFile, res, files)
	}
}

func checkDriver(t *testing.T, byKind map[string][]object) {
	drivers := byKind["storage.k8s.io/v1/CSIDriver"]
	if len(drivers) != 1 {
		t.Fatalf("%d CSIDriver objects, want 1", len(drivers))
	}
	d := drivers[0].obj.(*storagev1.CSIDriver)
	if d.Name != csi.DefaultName {
		t.Errorf("CSIDriver %s, want %s", d.Name, csi.DefaultName)
	}
	// The driver serves ControllerPublishVolume (planned moves), and
	// answers GetCapacity.
	if d.Spec.AttachRequired == nil || !*d.Spec.AttachRequired {
		t.Error("CSIDriver: attachRequired must be true (ControllerPublishVolume moves volumes on shared origins)")
	}
	if d.Spec.StorageCapacity == nil || !*d.Spec.StorageCapacity {
		t.Error("CSIDriver: storageCapacity must be true (GetCapacity is served)")
	}
	classes := byKind["storage.k8s.io/v1/StorageClass"]
	if len(classes) == 0 {
		t.Error("no StorageClass")
	}
	for _, o := range classes {
		sc := o.obj.(*storagev1.StorageClass)
		if sc.Provisioner != csi.DefaultName {
			t.Errorf("%s: provisioner %s, want %s", o, sc.Provisioner, csi.DefaultName)
		}
		// A volume on a shared origin is its device's size, which the
		// driver refuses to change; any other volume grows online.
		shared := sc.Parameters[csi.ParamSharedOrigin] != ""
		if grows := sc.AllowVolumeExpansion != nil && *sc.AllowVolumeExpansion; grows == shared {
			t.Errorf("%s: allowVolumeExpansion %t; want it only for classes not on shared origins (the driver expands those online)", o, grows)
		}
		if sc.VolumeBindingMode == nil || *sc.VolumeBindingMode != storagev1.VolumeBindingWaitForFirstConsumer {
			t.Errorf("%s: want volumeBindingMode WaitForFirstConsumer (a volume lives on one node)", o)
		}
		// The driver's own parser: what CreateVolume would accept.
		if _, err := csi.ParseParameters(sc.Parameters); err != nil {
			t.Errorf("%s: %v", o, err)
		}
	}
}

func checkWorkloads(t *testing.T, byKind map[string][]object, k kustomization) {
	configs := map[string]map[string]string{}
	for _, o := range byKind["v1/ConfigMap"] {
		configs[o.meta.Name] = o.obj.(*corev1.ConfigMap).Data
	}
	accounts := map[string]bool{}
	for _, o := range byKind["v1/ServiceAccount"] {
		accounts[o.meta.Name] = true
	}
	images := map[string]bool{}
	for _, img := range k.Images {
		images[img.Name] = true
		if img.NewTag == "" {
			t.Errorf("%s: image %s has no newTag", kustomizeFile, img.Name)
		}
	}
	type workload struct {
		o        object
		selector *metav1.LabelSelector
		pod      corev1.PodTemplateSpec
	}
	var ws []workload
	for _, o := range byKind["apps/v1/Deployment"] {
		d := o.obj.(*appsv1.Deployment)
		ws = append(ws, workload{o, d.Spec.Selector, d.Spec.Template})
	}
	for _, o := range byKind["apps/v1/DaemonSet"] {
		d := o.obj.(*appsv1.DaemonSet)
		ws = append(ws, workload{o, d.Spec.Selector, d.Spec.Template})
	}
	modes := map[string]bool{}
	for _, w := range ws {
		sel, err := metav1.LabelSelectorAsSelector(w.selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(w.pod.Labels)) {
			t.Errorf("%s: selector %v does not select its pod template's labels %v (%v)", w.o, w.selector, w.pod.Labels, err)
		}
		spec := w.pod.Spec
		if !accounts[spec.ServiceAccountName] {
			t.Errorf("%s: service account %q is not in rbac.yaml", w.o, spec.ServiceAccountName)
		}
		vols := map[string]bool{}
		for _, v := range spec.Volumes {
			vols[v.Name] = true
		}
		var names []string
		for _, c := range spec.Containers {
			names = append(names, c.Name)
			image, _, _ := strings.Cut(c.Image, ":")
			if !images[image] {
				t.Errorf("%s container %s: image %s is not in %s images", w.o, c.Name, image, kustomizeFile)
			}
			for _, m := range c.VolumeMounts {
				if !vols[m.Name] {
					t.Errorf("%s container %s: mounts undeclared volume %s", w.o, c.Name, m.Name)
				}
			}
			for _, e := range c.Env {
				if ref := e.ValueFrom; ref != nil && ref.ConfigMapKeyRef != nil {
					if _, ok := configs[ref.ConfigMapKeyRef.Name][ref.ConfigMapKeyRef.Key]; !ok {
						t.Errorf("%s container %s: env %s refers to ConfigMap %s key %s, which config.yaml lacks", w.o, c.Name, e.Name, ref.ConfigMapKeyRef.Name, ref.ConfigMapKeyRef.Key)
					}
				}
			}
			if p := c.LivenessProbe; p != nil && p.HTTPGet != nil {
				name := p.HTTPGet.Port.String()
				if !slices.ContainsFunc(c.Ports, func(cp corev1.ContainerPort) bool { return cp.Name == name }) {
					t.Errorf("%s container %s: liveness probe port %s is not a named port", w.o, c.Name, name)
				}
			}
			if image == containerImage {
				for _, a := range c.Args {
					if m, ok := strings.CutPrefix(a, "--mode="); ok {
						modes[m] = true
					}
				}
			}
		}
		if !slices.Contains(names, "liveness-probe") {
			t.Errorf("%s: no livenessprobe sidecar", w.o)
		}
		// The controller advertises EXPAND_VOLUME: without the resizer
		// nothing would call it.
		if slices.Contains(names, "csi-provisioner") && !slices.Contains(names, "csi-resizer") {
			t.Errorf("%s: no csi-resizer sidecar beside the provisioner", w.o)
		}
		// ... and PUBLISH_UNPUBLISH_VOLUME: without the attacher the
		// kubelet would wait for VolumeAttachments nobody serves.
		if slices.Contains(names, "csi-provisioner") && !slices.Contains(names, "csi-attacher") {
			t.Errorf("%s: no csi-attacher sidecar beside the provisioner", w.o)
		}
	}
	if !modes["controller"] || !modes["node"] {
		t.Errorf("tidecache-csi runs in modes %v, want a controller and a node workload", modes)
	}
}

// checkRBAC: every binding names a role and an account that exist.
func checkRBAC(t *testing.T, byKind map[string][]object) {
	exists := func(kind, name string) bool {
		return slices.ContainsFunc(byKind[kind], func(o object) bool { return o.meta.Name == name })
	}
	check := func(o object, ref rbacv1.RoleRef, subjects []rbacv1.Subject) {
		kind := "rbac.authorization.k8s.io/v1/" + ref.Kind
		if !exists(kind, ref.Name) {
			t.Errorf("%s: roleRef %s %s does not exist", o, ref.Kind, ref.Name)
		}
		for _, s := range subjects {
			if s.Kind != "ServiceAccount" || s.Namespace != namespace || !exists("v1/ServiceAccount", s.Name) {
				t.Errorf("%s: subject %+v is not a service account of the manifests", o, s)
			}
		}
	}
	for _, o := range byKind["rbac.authorization.k8s.io/v1/ClusterRoleBinding"] {
		b := o.obj.(*rbacv1.ClusterRoleBinding)
		check(o, b.RoleRef, b.Subjects)
	}
	for _, o := range byKind["rbac.authorization.k8s.io/v1/RoleBinding"] {
		b := o.obj.(*rbacv1.RoleBinding)
		check(o, b.RoleRef, b.Subjects)
	}
}

func checkMonitoring(t *testing.T, byKind map[string][]object) {
	for _, o := range byKind["monitoring.coreos.com/v1/ServiceMonitor"] {
		sm := o.obj.(*monitoringv1.ServiceMonitor)
		sel, err := metav1.LabelSelectorAsSelector(&sm.Spec.Selector)
		if err != nil {
			t.Errorf("%s: %v", o, err)
			continue
		}
		found := false
		for _, so := range byKind["v1/Service"] {
			svc := so.obj.(*corev1.Service)
			if !sel.Matches(labels.Set(svc.Labels)) {
				continue
			}
			found = true
			// The Prometheus Operator names the job after the Service,
			// or after the value of the Service's label that jobLabel
			// names; the alert rules select job="tidecache".
			job := svc.Name
			if v, ok := svc.Labels[sm.Spec.JobLabel]; sm.Spec.JobLabel != "" && ok {
				job = v
			}
			for _, want := range alertJobs(t) {
				if job != want {
					t.Errorf("%s: scrapes %s as job %q, but the alert rules select job=%q", o, so, job, want)
				}
			}
			for _, ep := range sm.Spec.Endpoints {
				if !slices.ContainsFunc(svc.Spec.Ports, func(p corev1.ServicePort) bool { return p.Name == ep.Port }) {
					t.Errorf("%s: endpoint port %q is not a port of %s", o, ep.Port, so)
				}
			}
		}
		if !found {
			t.Errorf("%s: selects no Service of the manifests", o)
		}
	}
	want := prometheusRule(t)
	if *update {
		if err := os.WriteFile(ruleFile, want, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	if rules := byKind["monitoring.coreos.com/v1/PrometheusRule"]; len(rules) != 1 {
		t.Fatalf("%d PrometheusRule objects, want 1", len(rules))
	}
	have, err := os.ReadFile(ruleFile)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(have, want) {
		t.Errorf("%s differs from %s: run `go test ./deploy/kubernetes -update`", ruleFile, alertsFile)
	}
}

// prometheusRule renders the PrometheusRule that carries the alert rules
// file, decoded strictly as the operator's RuleGroup type.
func prometheusRule(t *testing.T) []byte {
	t.Helper()
	data, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var spec monitoringv1.PrometheusRuleSpec
	if err := yaml.UnmarshalStrict(data, &spec); err != nil {
		t.Fatalf("%s as PrometheusRule groups: %v", alertsFile, err)
	}
	if len(spec.Groups) == 0 {
		t.Fatalf("%s: no groups", alertsFile)
	}
	rule := monitoringv1.PrometheusRule{
		TypeMeta: metav1.TypeMeta{APIVersion: "monitoring.coreos.com/v1", Kind: "PrometheusRule"},
		ObjectMeta: metav1.ObjectMeta{Name: "tidecache", Namespace: namespace,
			Labels: map[string]string{"app.kubernetes.io/name": "tidecache", "app.kubernetes.io/part-of": "tidecache"}},
		Spec: spec,
	}
	out, err := yaml.Marshal(rule)
	if err != nil {
		t.Fatal(err)
	}
	header := "# Generated from deploy/prometheus/tidecache-alerts.yml by\n" +
		"# `go test ./deploy/kubernetes -update`; edit that file, not this one\n" +
		"# (the test fails when the two differ). docs/metrics.md explains each alert.\n"
	return append([]byte(header), out...)
}

// The decoding must be able to fail: a misspelt field, a field at the
// wrong level, a bad quantity, a ServiceMonitor field the operator's type
// lacks.
func TestDecodeRefuses(t *testing.T) {
	for _, doc := range []string{
		"apiVersion: storage.k8s.io/v1\nkind: StorageClass\nmetadata: {name: x}\nprovisioner: p\nvolumeBindingMod: Immediate\n",
		"apiVersion: apps/v1\nkind: DaemonSet\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers: [{name: c, image: i, mountPropagation: Bidirectional}]\n",
		"apiVersion: v1\nkind: ConfigMap\nmetadata: {name: x, labels: {a: b}, label: {}}\n",
		"apiVersion: apps/v1\nkind: Deployment\nmetadata: {name: x}\nspec:\n  template:\n    spec:\n      containers: [{name: c, image: i, resources: {limits: {memory: 12 GB}}}]\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: ServiceMonitor\nmetadata: {name: x}\nspec:\n  endpoints: [{port: m, scrape_interval: 30s}]\n",
		"apiVersion: monitoring.coreos.com/v1\nkind: PrometheusRule\nmetadata: {name: x}\nspec:\n  groups: [{name: g, rules: [{alert: A, expr: up == 0, for: soon}]}]\n",
		"apiVersion: v1\nkind: Pod\nmetadata: {name: x}\n",
	} {
		if o, err := decode([]byte(doc)); err == nil {
			t.Errorf("accepted %s:\n%s", o.kind, doc)
		}
	}
}

// TestContainerfile: the image holds the tools the node service runs and
// the issue asks for, and the DKMS source of both kernel modules under
// the version dkms.conf names.
func TestContainerfile(t *testing.T) {
	data, err := os.ReadFile("Containerfile")
	if err != nil {
		t.Fatal(err)
	}
	cf := string(data)
	for _, pkg := range []string{"util-linux", "e2fsprogs", "xfsprogs", "mdadm", "nvme-cli"} {
		if !regexp.MustCompile(`(?m)^\s+.*\b` + regexp.QuoteMeta(pkg) + `\b`).MatchString(cf) {
			t.Errorf("Containerfile installs no %s", pkg)
		}
	}
	conf, err := os.ReadFile("../../kernel/dkms.conf")
	if err != nil {
		t.Fatal(err)
	}
	m := regexp.MustCompile(`(?m)^PACKAGE_VERSION="([^"]+)"`).FindSubmatch(conf)
	if m == nil {
		t.Fatal("dkms.conf has no PACKAGE_VERSION")
	}
	// The layout of `make dkms-src`: dkms.conf and the top Kbuild, and
	// each module's source and Kbuild in its directory.
	dst := "/usr/src/tidecache-dkms-" + string(m[1]) + "/"
	for _, line := range []string{
		"COPY kernel/dkms.conf kernel/Kbuild " + dst + "\n",
		"COPY kernel/dm-fuaflush/dm-fuaflush.c kernel/dm-fuaflush/Kbuild " + dst + "dm-fuaflush/\n",
		"COPY kernel/dm-readfirst/dm-readfirst.c kernel/dm-readfirst/Kbuild " + dst + "dm-readfirst/\n",
		"COPY kernel/dm-errhold/dm-errhold.c kernel/dm-errhold/Kbuild " + dst + "dm-errhold/\n",
	} {
		if !strings.Contains(cf, line) {
			t.Errorf("Containerfile lacks %q (the DKMS source under dkms.conf's version)", strings.TrimSpace(line))
		}
	}
	for _, f := range []string{"./cmd/tidecache-csi", "ENTRYPOINT [\"/usr/sbin/tidecache-csi\"]"} {
		if !strings.Contains(cf, f) {
			t.Errorf("Containerfile lacks %s", f)
		}
	}
}

// alertJobs returns the job names the alert rules select (job="..."),
// each once.
func alertJobs(t *testing.T) []string {
	t.Helper()
	b, err := os.ReadFile(alertsFile)
	if err != nil {
		t.Fatal(err)
	}
	var jobs []string
	for _, m := range regexp.MustCompile(`job="([^"]*)"`).FindAllStringSubmatch(string(b), -1) {
		if !slices.Contains(jobs, m[1]) {
			jobs = append(jobs, m[1])
		}
	}
	if len(jobs) == 0 {
		t.Fatalf("%s selects no job: the TargetDown and TargetAbsent rules should", alertsFile)
	}
	return jobs
}
