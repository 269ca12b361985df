# tidecache — run `make help` for the targets.
SHELL := /bin/bash
.DEFAULT_GOAL := help

VERSION ?= $(shell git describe --tags --always --dirty 2>/dev/null || echo dev)
LDFLAGS := -X github.com/tidecache/tidecache/pkg/version.Version=$(VERSION)
BIN     := bin
GO      ?= go
N       ?= 100

# VMs boot bookworm's 6.1 (linux-image-amd64) by default; a test
# (harness.Kernel612) or TIDECACHE_VM_KERNEL=6.12 boots its 6.12, which has
# NVMe in-band auth. Each meta-package tracks the newest ABI of its series,
# the one the harness boots; zstd unpacks 6.12's image for the fast boot.
VM_KERNEL_PACKAGES := linux-image-6.12-amd64 linux-headers-6.12-amd64 zstd
# Debian packages the demo and the tests need (the VM boots Debian's kernel
# and runs the host's own fio, mdadm, dmsetup, MariaDB and sysbench through
# a 9p root).
APT_PACKAGES := qemu-system-x86 linux-image-amd64 linux-headers-amd64 dkms busybox-static kmod cpio \
	dmsetup mdadm fio nvme-cli util-linux fdisk e2fsprogs xfsprogs procps systemd xz-utils prometheus curl \
	mariadb-server sysbench udev nftables $(VM_KERNEL_PACKAGES)
# What `make bench` adds: the peers it measures tidecache against (bcache,
# lvm2).
BENCH_PACKAGES := bcache-tools lvm2

.PHONY: help
help: ## Show this help.
	@awk 'BEGIN {FS = ":.*## "} /^[a-zA-Z_-]+:.*## / {printf "  \033[36m%-14s\033[0m %s\n", $$1, $$2}' $(MAKEFILE_LIST)

.PHONY: deps
deps: ## Install the apt packages and Go modules the demo and tests need (idempotent).
	@$(MAKE) --no-print-directory apt-install PACKAGES="$(APT_PACKAGES)"
	@$(GO) mod download

.PHONY: apt-install
apt-install:
	@missing=$$(for p in $(PACKAGES); do dpkg-query -W -f='$${Status}\n' $$p 2>/dev/null | grep -q 'install ok installed' || echo $$p; done); \
	if [ -n "$$missing" ]; then \
		echo "deps: installing $$missing"; \
		if [ "$$(id -u)" != 0 ]; then echo "deps: run as root (apt-get install)" >&2; exit 1; fi; \
		apt-get update -q && DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends $$missing; \
	fi

.PHONY: build
build: ## Build tidectl and tidecached into bin/.
	$(GO) build -ldflags '$(LDFLAGS)' -o $(BIN)/ ./cmd/...

# Install layout (Debian's): make install DESTDIR=… PREFIX=/usr.
PREFIX     ?= /usr
DESTDIR    ?=
SHARE      ?= build/share
DEBROOT    ?= build/deb
DEB_OUT    ?= build
DEB_VERSION ?= 0.1.0+git$(shell git rev-list --count HEAD 2>/dev/null || echo 0).$(shell git rev-parse --short HEAD 2>/dev/null || echo local)
# The kernel modules, dm-fuaflush, dm-readfirst and dm-errhold, are one DKMS
# package, tidecache-dkms (kernel/dkms.conf). Its DKMS version is the
# package's: DKMS keys a build to its version, so each package's module
# source is built anew, and an upgrade replaces the previous version's
# build (deploy/debian/postinst).
DKMS_VER   ?= $(DEB_VERSION)
# FUAFLUSH_SRC, READFIRST_SRC and ERRHOLD_SRC are where each module's
# source is taken from (a test builds a package of a changed copy).
FUAFLUSH_SRC  ?= kernel/dm-fuaflush
READFIRST_SRC ?= kernel/dm-readfirst
ERRHOLD_SRC   ?= kernel/dm-errhold
DEB_ARCH   ?= $(shell dpkg --print-architecture 2>/dev/null || echo amd64)

.PHONY: install
install: build ## Install binaries, units, udev rule, man pages, completion, docs and the DKMS source of the kernel modules (tidecache-dkms) under $(DESTDIR)$(PREFIX).
	rm -rf $(SHARE) && $(GO) run ./internal/cmd/gendocs -out $(SHARE)
	install -d $(DESTDIR)$(PREFIX)/sbin $(DESTDIR)$(PREFIX)/lib/systemd/system $(DESTDIR)$(PREFIX)/lib/udev/rules.d \
		$(DESTDIR)$(PREFIX)/share/man/man7 $(DESTDIR)$(PREFIX)/share/man/man8 $(DESTDIR)$(PREFIX)/share/bash-completion/completions \
		$(DESTDIR)$(PREFIX)/share/zsh/vendor-completions $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d \
		$(DESTDIR)$(PREFIX)/share/doc/tidecache $(DESTDIR)$(PREFIX)/share/tidecache/prometheus $(DESTDIR)$(PREFIX)/share/tidecache/grafana \
		$(DESTDIR)$(PREFIX)/share/tidecache/systemd/mariadb.service.d \
		$(DESTDIR)/etc/default $(DESTDIR)/etc/tidecache
	install -m 0755 $(BIN)/tidectl $(BIN)/tidecached $(BIN)/tidecache-csi $(DESTDIR)$(PREFIX)/sbin/
	install -m 0644 deploy/systemd/tidecached.service deploy/systemd/tidecache-assemble.service $(DESTDIR)$(PREFIX)/lib/systemd/system/
	install -m 0644 deploy/systemd/mariadb.service.d/tidecache.conf $(DESTDIR)$(PREFIX)/share/tidecache/systemd/mariadb.service.d/
	install -m 0644 deploy/udev/12-tidecache.rules $(DESTDIR)$(PREFIX)/lib/udev/rules.d/
	for f in $(SHARE)/man/man8/*.8 deploy/man/*.8; do gzip -9n < $$f > $(DESTDIR)$(PREFIX)/share/man/man8/$$(basename $$f).gz; done
	for f in deploy/man/*.7; do gzip -9n < $$f > $(DESTDIR)$(PREFIX)/share/man/man7/$$(basename $$f).gz; done
	for b in tidectl tidecached; do \
		install -m 0644 $(SHARE)/completion/bash/$$b $(DESTDIR)$(PREFIX)/share/bash-completion/completions/$$b; \
		install -m 0644 $(SHARE)/completion/zsh/$$b $(DESTDIR)$(PREFIX)/share/zsh/vendor-completions/_$$b; \
		install -m 0644 $(SHARE)/completion/fish/$$b $(DESTDIR)$(PREFIX)/share/fish/vendor_completions.d/$$b.fish; \
	done
	install -m 0644 README.md docs/*.md $(DESTDIR)$(PREFIX)/share/doc/tidecache/
	install -m 0644 deploy/debian/copyright $(DESTDIR)$(PREFIX)/share/doc/tidecache/copyright
	install -m 0644 deploy/prometheus/*.yml $(DESTDIR)$(PREFIX)/share/tidecache/prometheus/
	cd deploy/prometheus && find scrape -type f -exec install -D -m 0644 {} $(abspath $(DESTDIR))$(PREFIX)/share/tidecache/prometheus/{} \;
	install -m 0644 deploy/grafana/*.json $(DESTDIR)$(PREFIX)/share/tidecache/grafana/
	$(MAKE) --no-print-directory dkms-src DKMS_SRC=$(DESTDIR)$(PREFIX)/src/tidecache-dkms-$(DKMS_VER)
	test -e $(DESTDIR)/etc/default/tidecache || install -m 0644 deploy/default/tidecache $(DESTDIR)/etc/default/tidecache

.PHONY: deb
deb: ## Build build/tidecache_<version>_<arch>.deb (dpkg-deb): everything `make install` installs, plus maintainer scripts.
	rm -rf $(DEBROOT) && $(MAKE) --no-print-directory install DESTDIR=$(abspath $(DEBROOT)) PREFIX=/usr
	install -d $(DEBROOT)/DEBIAN $(DEB_OUT)
	date=$$(git log -1 --format=%aD 2>/dev/null || date -R); \
	sed -e 's/@VERSION@/$(DEB_VERSION)/' -e "s/@DATE@/$$date/" deploy/debian/changelog.in | gzip -9n > $(DEBROOT)/usr/share/doc/tidecache/changelog.gz
	size=$$(du -sk --exclude=DEBIAN $(DEBROOT) | cut -f1); \
	sed -e 's/@VERSION@/$(DEB_VERSION)/' -e 's/@ARCH@/$(DEB_ARCH)/' -e "s/@SIZE@/$$size/" deploy/debian/control.in > $(DEBROOT)/DEBIAN/control
	install -m 0644 deploy/debian/conffiles $(DEBROOT)/DEBIAN/conffiles
	for s in postinst prerm; do sed 's/@DKMS_VERSION@/$(DKMS_VER)/' deploy/debian/$$s > $(DEBROOT)/DEBIAN/$$s && chmod 0755 $(DEBROOT)/DEBIAN/$$s; done
	dpkg-deb --root-owner-group -Zxz --build $(DEBROOT) $(DEB_OUT)/tidecache_$(DEB_VERSION)_$(DEB_ARCH).deb

.PHONY: dkms-src
# dkms-src lays out the source of the DKMS package in DKMS_SRC, as install
# ships it, kmod-install installs it and TestDKMSBuild builds it:
# kernel/dkms.conf under version DKMS_VER, kernel/Kbuild, and each module's
# Kbuild and source in its own directory.
dkms-src:
	@test -n "$(DKMS_SRC)" || { echo "dkms-src: set DKMS_SRC=<directory>" >&2; exit 1; }
	install -d $(DKMS_SRC)/dm-fuaflush $(DKMS_SRC)/dm-readfirst $(DKMS_SRC)/dm-errhold
	install -m 0644 kernel/Kbuild $(DKMS_SRC)/
	sed 's/^PACKAGE_VERSION=.*/PACKAGE_VERSION="$(DKMS_VER)"/' kernel/dkms.conf > $(DKMS_SRC)/dkms.conf
	install -m 0644 $(FUAFLUSH_SRC)/dm-fuaflush.c $(FUAFLUSH_SRC)/Kbuild $(DKMS_SRC)/dm-fuaflush/
	install -m 0644 $(READFIRST_SRC)/dm-readfirst.c $(READFIRST_SRC)/Kbuild $(DKMS_SRC)/dm-readfirst/
	install -m 0644 $(ERRHOLD_SRC)/dm-errhold.c $(ERRHOLD_SRC)/Kbuild $(DKMS_SRC)/dm-errhold/

.PHONY: kmod
kmod: ## Build the kernel modules, kernel/dm-fuaflush/dm-fuaflush.ko, kernel/dm-readfirst/dm-readfirst.ko and kernel/dm-errhold/dm-errhold.ko, for the running kernel, or KVER=<version> (needs linux-headers-<version>).
	$(MAKE) -C kernel $(if $(KVER),KVER=$(KVER))

.PHONY: kmod-install
# kmod-install first removes the builds of tidecache-fuaflush, the DKMS
# package that had dm-fuaflush alone: DKMS would keep its dm-fuaflush.ko in
# place of the new one, and delete the new one when that package goes.
kmod-install: ## Install dm-fuaflush (durable FUA writes), dm-readfirst (reads before write-back) and dm-errhold (holds a peer leg's failed I/O) with DKMS (package tidecache-dkms) for the running kernel and load them; DKMS rebuilds them for new kernels (needs dkms, headers).
	@command -v dkms >/dev/null || { echo "kmod-install: install dkms and linux-headers-$$(uname -r) first" >&2; exit 1; }
	@mkdir -p /var/lib/dkms
	@for dir in /var/lib/dkms/tidecache-fuaflush/*; do \
		old=$${dir##*/}; \
		[ -d "$$dir" ] && [ ! -L "$$dir" ] && [ "$$old" != original_module ] || continue; \
		dkms remove -m tidecache-fuaflush -v "$$old" --all || \
			{ echo "kmod-install: dkms could not remove tidecache-fuaflush $$old, whose dm-fuaflush.ko would stay (see dkms status)" >&2; exit 1; }; \
	done
	@rm -rf /usr/src/tidecache-dkms-$(DKMS_VER)
	@$(MAKE) --no-print-directory -s dkms-src DKMS_SRC=/usr/src/tidecache-dkms-$(DKMS_VER)
	@dkms status -m tidecache-dkms -v $(DKMS_VER) | grep -q . || dkms add -m tidecache-dkms -v $(DKMS_VER)
	@dkms install -m tidecache-dkms -v $(DKMS_VER) --force
	@modprobe -a dm-fuaflush dm-readfirst dm-errhold && echo "kmod-install: dm-fuaflush, dm-readfirst and dm-errhold $(DKMS_VER) installed and loaded"

.PHONY: demo
demo: deps build ## Boot a VM with emulated HDD RAID10 + SSD, create a cached volume, compare fio results.
	$(GO) run ./tests/demo

.PHONY: test
test: deps test-host test-vm test-vm-612 ## Run every test: host unit tests, the real-kernel VM suite, then its 6.12 subset.

.PHONY: test-host
test-host: ## Host-only tests (pure logic, no device-mapper needed).
	$(GO) vet ./...
	$(GO) test -count=1 ./...

.PHONY: test-vm
# test-vm leaves out what other tests in it cover, to keep .ci/run within
# its budget (docs/testing.md): the harness's boot and network self-tests
# (every scenario boots VMs; the peer and re-protection scenarios network
# three) and TestPowerCut (the crash suite cuts the power under the same
# fdatasync-acknowledged writes, flushes and drains, 4 times per
# workload); and, for time alone, TestUpgradeRebuildsModule (two DKMS
# builds under emulation, about 8 minutes) and four of TestNetworkPartition's
# seven cases (the leader's cut, the flapping link, the replica cut off,
# etcd's quorum lost: about 8 minutes; make test-partition runs them). csi-sanity runs on 6.12 only
# (test-vm-612): TestMoveWarm provisions, publishes, stages and mounts
# through the driver on 6.1. The peer mirror's own scenario
# (TestReplicaPeerVolume) is left to test-vm-all: the failover,
# re-protection, move and partition scenarios all mirror to a peer.
# TestMoveReplicaFirst (a move to a node without the replica, four VMs,
# about 3 minutes) is left to test-vm-all for time alone: the replica's
# move under I/O is the re-protection path TestReprotectPeer runs, and
# the handover TestMoveWarm's. So is TestFailoverReplicaNamespaceLost
# (three VMs, about 3 minutes: a repair's reload waits for the guard's
# mark; the guard's path itself runs in TestFailoverSharedOrigin and the
# partition cases). So are TestSSDLessOwner (four VMs, about 9 minutes)
# and TestSSDLessBoot (three VMs): a node without SSDs, its write cache on
# two peers; the layout, the engine, boot and the control plane of such
# volumes are host-tested in pkg/pool, pkg/engine, pkg/placement,
# pkg/daemon and pkg/reconcile, and dm-raid over two NVMe/TCP legs is the
# peer mirror the other cluster scenarios run with one. So is
# TestFencingExportCutsHost (two VMs, alone, about 80 s): the fence at the
# export runs end to end in TestFailoverSharedOrigin (san cuts the dead
# owner off, refuses its assembly after it boots, serves it again once
# the fence is lifted) and in TestNetworkPartition (the owner cut off
# from etcd, fenced while its writer runs, acknowledges nothing more).
# test-vm-all runs everything.
VM_CI_SKIP := ^(TestHarnessBoot|TestHarnessNetwork|TestPowerCut|TestUpgradeRebuildsModule|TestCSISanity|TestReplicaPeerVolume|TestMoveReplicaFirst|TestFailoverReplicaNamespaceLost|TestSSDLessOwner|TestSSDLessBoot|TestFencingExportCutsHost)$$
test-vm: ## Real-kernel tests in qemu VMs, as .ci/run runs them: harness self-tests, then the scenarios, one package at a time (prints each test and its result; full log in .cache/test-vm.log).
	@mkdir -p .cache
	@set -o pipefail; $(GO) test -p 1 -parallel 64 -count=1 -tags vm -timeout 80m -v -skip '$(VM_CI_SKIP)' ./tests/vm/harness/ ./tests/vm/ 2>&1 | tee .cache/test-vm.log \
		| grep --line-buffered -E '^\s*(=== RUN|--- (PASS|FAIL|SKIP)|PASS$$|FAIL|ok |panic:)'; rc=$$?; \
	if [ $$rc != 0 ]; then echo "--- what each failed test printed (start and end; the whole log is .cache/test-vm.log) ---"; \
		$(GO) run ./tests/tools/testdigest -head 40 -tail 30 .cache/test-vm.log; fi; exit $$rc

.PHONY: test-vm-612
# The kernel users of Debian 13 and bookworm's newer series run: the data
# path (the lifecycle, whose writeback stack holds dm-fuaflush and
# dm-readfirst, and FUA), one crash-suite round, the write mirror,
# csi-sanity, dm-errhold and the golden dm lines, booted on bookworm's
# 6.12 (the whole suite on it: TIDECACHE_VM_KERNEL=6.12 make test-vm-all).
VM_612_TESTS = TestVolumeLifecycle|TestFUAFlush|TestErrHold|TestCrashSuite|TestReplicaLocalMirror|TestCSISanity|TestDMKernel
test-vm-612: ## The 6.12 subset .ci/run runs: data path, one crash round, the write mirror and csi-sanity on bookworm's 6.12 kernel (log in .cache/test-vm-612.log).
	@mkdir -p .cache
	@set -o pipefail; TIDECACHE_VM_KERNEL=6.12 $(GO) test -p 1 -parallel 64 -count=1 -tags vm -timeout 40m -v -run '^($(VM_612_TESTS))$$' ./tests/vm/ 2>&1 | tee .cache/test-vm-612.log \
		| grep --line-buffered -E '^\s*(=== RUN|--- (PASS|FAIL|SKIP)|PASS$$|FAIL|ok |panic:)'; rc=$$?; \
	if [ $$rc != 0 ]; then echo "--- what each failed test printed (start and end; the whole log is .cache/test-vm-612.log) ---"; \
		$(GO) run ./tests/tools/testdigest -head 40 -tail 30 .cache/test-vm-612.log; fi; exit $$rc

.PHONY: test-vm-all
test-vm-all: ## Every real-kernel test, including those test-vm leaves out (about 25 minutes more).
	$(GO) test -count=1 -tags vm -timeout 30m -v ./tests/vm/harness/
	$(GO) test -parallel 64 -count=1 -tags vm -timeout 100m -v ./tests/vm/ -all-cases

.PHONY: test-harness
test-harness: ## Self-tests of the VM harness only (tests/vm/harness: boot, power cut, network, plus its host unit tests).
	$(GO) test -count=1 -tags vm -timeout 20m -v ./tests/vm/harness/

.PHONY: vm-run
vm-run: ## Boot a throwaway VM and run CMD in it: make vm-run CMD="'dmsetup targets'"
	$(GO) run ./tests/vm/harness/vmrun $(CMD)

.PHONY: test-crash
test-crash: ## Power-cut tests (raw records; fs + raw crash suite) with N cycles each (default 100): make test-crash N=100
	$(GO) test -count=1 -tags vm -timeout 180m -v -run 'TestPowerCut|TestCrashSuite' ./tests/vm/ -crash-cycles=$(N) -powercut-cycles=$(N)

.PHONY: test-partition
# N defaults to 3 rounds here (the 100 of test-crash would take a day):
# each round boots its three VMs and runs every case, about 10 minutes
# under emulation.
PARTITION_ROUNDS = $(if $(filter command line environment,$(origin N)),$(N),3)
test-partition: ## The network-partition suite (TestNetworkPartition: all seven cases on three VMs, the four .ci/run leaves out too) N times (default 3): make test-partition N=5
	$(GO) test -count=$(PARTITION_ROUNDS) -tags vm -timeout $$(( $(PARTITION_ROUNDS) * 30 ))m -v -run '^TestNetworkPartition$$' ./tests/vm/ -all-cases

.PHONY: bench
bench: deps ## The write cache mirrored to a peer VM vs unmirrored, then the pressure run, then tidecache vs SSD, RAID10, bcache, lvmcache (fio + MariaDB), whose report embeds the first two's goals: each run <90 min to docs/, QUICK=1 <30 min each to .cache/bench/.
	@$(MAKE) --no-print-directory apt-install PACKAGES="$(BENCH_PACKAGES)"
ifdef QUICK
	$(GO) run ./tests/bench -replica -quick -out .cache/bench/benchmarks-replica.md
	$(GO) run ./tests/bench -pressure -quick -out .cache/bench/benchmarks-pressure.md
	$(GO) run ./tests/bench -quick -out .cache/bench/benchmarks.md
else
	$(GO) run ./tests/bench -replica -out docs/benchmarks-replica.md
	$(GO) run ./tests/bench -pressure -out docs/benchmarks-pressure.md
	$(GO) run ./tests/bench -out docs/benchmarks.md
	$(GO) run ./tests/bench/controlplane -out docs/benchmarks.md
endif

.PHONY: bench-pressure
bench-pressure: deps ## Only the pressure run of make bench: every cache with a working set 4x its size, past a full write cache, on mq-deadline and none (charts under docs/bench-pressure/; QUICK=1: mq-deadline, no MariaDB, <30 min to .cache/bench/).
	@$(MAKE) --no-print-directory apt-install PACKAGES="$(BENCH_PACKAGES)"
ifdef QUICK
	$(GO) run ./tests/bench -pressure -quick -out .cache/bench/benchmarks-pressure.md
else
	$(GO) run ./tests/bench -pressure -out docs/benchmarks-pressure.md
endif

.PHONY: bench-replica
bench-replica: deps ## Only the replicated run of make bench: three VMs, the write cache mirrored over NVMe/TCP to one peer and to two (a pool without SSDs) vs unmirrored, and planned moves (QUICK=1: short profile to .cache/bench/).
	@$(MAKE) --no-print-directory apt-install PACKAGES="$(BENCH_PACKAGES)"
ifdef QUICK
	$(GO) run ./tests/bench -replica -quick -out .cache/bench/benchmarks-replica.md
else
	$(GO) run ./tests/bench -replica -out docs/benchmarks-replica.md
endif

.PHONY: fuzz
fuzz: ## Run the fuzz tests for a short while each.
	$(GO) test -run '^$$' -fuzz FuzzDecode -fuzztime 30s ./pkg/superblock/

.PHONY: clean
clean: ## Remove build output and VM caches.
	rm -rf $(BIN) build .cache
