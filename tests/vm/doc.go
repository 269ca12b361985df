// SPDX-License-Identifier: Apache-2.0

// Package vm holds tidecache's real-kernel scenarios: external tests
// (package vm_test, build tag vm) that build tidectl, tidecached and the
// test tools, boot qemu VMs running the Debian kernel through
// tests/vm/harness and check volumes, power cuts, crash consistency, faults,
// replay and clusters against the real device-mapper, md and nvmet.
//
//	go test -tags vm -run TestVolumeLifecycle ./tests/vm/
//
// `make test-vm` runs them after the harness's own self-tests
// (tests/vm/harness), one package at a time; docs/testing.md describes
// each scenario. The package has no code of its own.
//
// A VM under emulation keeps about one and a half of CI's two cores busy,
// so the scenarios that time something (a failover, a read under a write
// burst, a watchdog, marks taken within milliseconds of a stop) run alone:
// they must not share the CPU. Scenarios that time nothing, whose waits
// are all generous polls (bad input, adopt and detach, lifecycles, live
// mode changes, resize, assembly, the systemd boot, the daemon's
// reconcile and etcd outage, tuning, drift, SSD and RAID member faults,
// the local mirror, the Prometheus scrape, fuaflush's counters, and the
// crash suite, whose power cuts come at random moments anyway),
// call besideAnother (t.Parallel): go test runs them after the others,
// two at a time in lanes handed out longest first (lanes_test.go; go test
// -parallel must let them all resume: the Makefile passes 64), to keep
// .ci/run within its budget, each VM with one vCPU so that the two VMs
// do not oversubscribe the host.
package vm
