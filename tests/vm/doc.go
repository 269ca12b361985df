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
package vm
