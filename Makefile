# chanos build. `make` builds bin/chanos, bin/chanosc and the C library;
# `make test` runs every test; `make demo` runs the main job.
GO          ?= go
BUILD       ?= build
STATICCHECK ?= $(GO) run honnef.co/go/tools/cmd/staticcheck@v0.8.2
CMAKE       ?= cmake
JOBS        ?= 2

.PHONY: all go examples c test test-go test-c test-tasks-tsan test-hostile lint generate check-generated check-vectors demo install clean FORCE bench-smoke netns-clean

all: go c bin/chanos-peers

go: bin/chanos bin/chanosc examples

# The benchmark peers live in their own module (bench/peers), so that the
# core module never depends on gRPC or shmipc-go.
bin/chanos-peers: FORCE
	cd bench/peers && $(GO) build -o ../../bin/chanos-peers ./cmd/chanos-peers

# The example programs; `chanos demo` runs them from beside itself.
examples: FORCE
	$(GO) build -o bin/pingpong-server ./examples/pingpong/server
	$(GO) build -o bin/pingpong-client ./examples/pingpong/client

bin/chanos: FORCE
	$(GO) build -o $@ ./cmd/chanos

bin/chanosc: FORCE
	$(GO) build -o $@ ./cmd/chanosc

# The C library and its tests; interfaces are compiled by the chanosc just built.
c: bin/chanosc
	$(CMAKE) -S c -B $(BUILD)/c -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCHANOSC=$(abspath bin/chanosc) >/dev/null
	$(CMAKE) --build $(BUILD)/c -j $(JOBS)

# Regenerates the committed Go code of the bundled and test interfaces.
generate: bin/chanosc
	$(GO) generate ./...

# Fails if the committed generated code differs from what chanosc writes now.
check-generated: generate
	@git diff --exit-code --stat -- '*.go' || { echo "generated Go code is stale: run 'make generate' and commit" >&2; exit 1; }

# The wire vectors are written by an independent Python encoder; they must
# match it (testdata/wire/README.md).
check-vectors:
	python3 testdata/wire/mkvectors.py -check

lint:
	@out=$$(gofmt -l $$(git ls-files '*.go')); if [ -n "$$out" ]; then echo "gofmt needed:" $$out >&2; exit 1; fi
	$(GO) vet ./...
	@# The arm64 files (assembly, system call numbers) are built by no test
	@# on this x86-64 machine: vet them, asm argument checks included.
	GOARCH=arm64 $(GO) vet ./...
	$(STATICCHECK) ./...
	cd bench/peers && $(GO) vet ./... && $(STATICCHECK) ./...

test-go: go c
	CHANOS_C_BUILD=$(abspath $(BUILD)/c) $(GO) test -race -count=1 -timeout 300s ./...
	# Without -race too: the ring's exclusive calls then take their fast
	# path (plain stores, and Close's membarrier), which -race replaces.
	CHANOS_C_BUILD=$(abspath $(BUILD)/c) $(GO) test -count=1 -timeout 300s ./interconnect/ump/ ./chanos/
	cd bench/peers && $(GO) test -race -count=1 -timeout 300s ./...

# The hostile-peer suite alone (docs/security.md): every attack against the
# monitor, a Go domain and a C domain (tests/hostile, and the monitor's
# quota attacks); it prints the table of attacks and outcomes, and fails
# if any victim stopped serving. test-go runs the same tests with the rest.
HOSTILE_TABLE = $(abspath $(BUILD))/hostile.md
test-hostile: go c
	@printf '| attack | victim | outcome | victim before | victim after |\n|---|---|---|---|---|\n' > $(HOSTILE_TABLE)
	@export CHANOS_C_BUILD=$(abspath $(BUILD)/c) CHANOS_HOSTILE_TABLE=$(HOSTILE_TABLE); \
		$(GO) test -count=1 -timeout 600s ./tests/hostile/; a=$$?; \
		$(GO) test -count=1 -timeout 300s -run '^(TestAttack|TestMemoryBoundUnderAttack)' ./monitor/; b=$$?; \
		echo; cat $(HOSTILE_TABLE); [ $$a -eq 0 ] && [ $$b -eq 0 ]

# The sanitizers' own exit status, 23, for every C program the tests start
# (docs/c-domains.md): a report fails the test even where the program is
# expected to fail. tests/interop sets the same for the programs it starts.
SANITIZER_ENV = ASAN_OPTIONS=exitcode=23:abort_on_error=0:detect_leaks=1 \
	UBSAN_OPTIONS=halt_on_error=1:exitcode=23:abort_on_error=0:print_stacktrace=1

# C tests run under AddressSanitizer and UndefinedBehaviorSanitizer.
test-c: bin/chanosc c
	$(CMAKE) -S c -B $(BUILD)/c-san -DCMAKE_BUILD_TYPE=Debug -DCHANOS_SANITIZE=ON -DCHANOSC=$(abspath bin/chanosc) >/dev/null
	$(CMAKE) --build $(BUILD)/c-san -j $(JOBS)
	$(SANITIZER_ENV) ctest --test-dir $(BUILD)/c-san --output-on-failure
	# tasks_memory limits the address space, which the sanitizers' shadow
	# memory does not allow: the plain build runs it.
	ctest --test-dir $(BUILD)/c -R '^tasks_memory$$' --output-on-failure
	# The C programs that talk to a real monitor, and the C ring peer of
	# the cross-language tests (c/tools), under the sanitizers too.
	$(SANITIZER_ENV) CHANOS_C_BUILD=$(abspath $(BUILD)/c-san) $(GO) test -count=1 -timeout 300s ./tests/interop/ ./tests/spawn/
	$(SANITIZER_ENV) CHANOS_C_BUILD=$(abspath $(BUILD)/c-san) $(GO) test -count=1 -timeout 300s -run '^TestCrossLanguage' ./interconnect/ump/
	$(SANITIZER_ENV) CHANOS_C_BUILD=$(abspath $(BUILD)/c-san) $(GO) test -count=1 -timeout 300s ./examples/driver/...
	# C domains on both sides of connections between machines (libchanos's
	# binder state, libchanos_net's listeners, the endpoint relays), in
	# network namespaces.
	$(SANITIZER_ENV) CHANOS_C_BUILD=$(abspath $(BUILD)/c-san) $(GO) test -count=1 -timeout 300s -run '^(TestCAcrossMachines|TestAuthOnlyAcrossMachines|TestCEndpointAcrossMachines|TestCEndpointToOtherMachine)$$' ./tests/cluster/

# The task runtime's tests (c/tasks), libchanos_net's (c/net) and the
# health statuses' (c/tests/health_test.c) under ThreadSanitizer; test-c
# runs them under AddressSanitizer and UndefinedBehaviorSanitizer.
test-tasks-tsan: bin/chanosc
	$(CMAKE) -S c -B $(BUILD)/c-tsan -DCMAKE_BUILD_TYPE=Debug -DCHANOS_TSAN=ON -DCHANOSC=$(abspath bin/chanosc) >/dev/null
	# Both libraries first: tasks_pkgconfig installs the build, and the
	# install takes libchanos_net too.
	$(CMAKE) --build $(BUILD)/c-tsan -j $(JOBS) --target chanos_tasks_tests chanos_net_tests health_test
	TSAN_OPTIONS=halt_on_error=1:exitcode=23 ctest --test-dir $(BUILD)/c-tsan -R '^tasks_' --output-on-failure
	# libchanos_net (c/net): its links' and listeners' threads.
	TSAN_OPTIONS=halt_on_error=1:exitcode=23 ctest --test-dir $(BUILD)/c-tsan -R '^net_test_' --output-on-failure
	# libchanos's health statuses: set on one thread while another serves.
	TSAN_OPTIONS=halt_on_error=1:exitcode=23 ctest --test-dir $(BUILD)/c-tsan -R '^health_test$$' --output-on-failure

test: all lint check-generated check-vectors test-go test-c test-tasks-tsan bench-smoke

# `chanos bench all --quick` (about 30 s): every suite runs against its
# peers, prints a line per case and draws the chart; then chanos's figures
# must stay within wide bounds of its own raw baselines of the same run
# (`chanos bench check`, docs/bench-compare.md "Regression bounds").
bench-smoke: all
	CHANOS_C_BUILD=$(abspath $(BUILD)/c) ./bin/chanos bench all --quick --json --plot $(BUILD)/bench-smoke.png > $(BUILD)/bench-smoke.jsonl
	@for s in pingpong stream rpc ump bind clients ring spawn; do \
		grep -q "\"suite\":\"$$s\"" $(BUILD)/bench-smoke.jsonl || { echo "bench-smoke: no $$s results" >&2; exit 1; }; \
	done
	@# The ratios paired by round: rpc against the raw ring, go-go against c-c.
	@grep '"suite":"rpc","case":"rpc","transport":"ump"' $(BUILD)/bench-smoke.jsonl | grep -q '"paired_ratio"' || { echo "bench-smoke: rpc over ump has no paired ratio" >&2; exit 1; }
	@grep '"suite":"ump","case":"rtt-spin","transport":"ump","peers":"go-go"' $(BUILD)/bench-smoke.jsonl | grep -q '"paired_ratio"' || { echo "bench-smoke: the Go tax has no paired ratio" >&2; exit 1; }
	@# A bound broken once may be another process taking a spinning side's
	@# CPU on a shared machine: the suites of the broken bounds run again,
	@# and only a bound broken twice fails (a regression breaks it every time).
	./bin/chanos bench check $(BUILD)/bench-smoke.jsonl || { \
		echo "bench-smoke: a bound was broken; running ump and rpc again" >&2; \
		CHANOS_C_BUILD=$(abspath $(BUILD)/c) ./bin/chanos bench ump --quick --json > $(BUILD)/bench-smoke-again.jsonl && \
		CHANOS_C_BUILD=$(abspath $(BUILD)/c) ./bin/chanos bench rpc --quick --json >> $(BUILD)/bench-smoke-again.jsonl && \
		./bin/chanos bench check $(BUILD)/bench-smoke-again.jsonl; }

demo: all
	./bin/chanos demo

# Installs libchanos (static), chanos.h, DIR/lib/pkgconfig/chanos.pc, the
# bundled interfaces (DIR/share/chanos/interfaces), chanosc and chanos (the
# monitor, ps, names) under PREFIX (docs/c-domains.md): all a C-only user
# needs.
PREFIX ?= /usr/local
install: c bin/chanos
	$(CMAKE) --install $(BUILD)/c --prefix $(abspath $(PREFIX))
	install -d $(PREFIX)/bin
	install -m 0755 bin/chanosc $(PREFIX)/bin/chanosc
	install -m 0755 bin/chanos $(PREFIX)/bin/chanos

clean:
	rm -rf bin $(BUILD)

# Removes what clusters of machines on one host left when their owner died
# (docs/netns.md); needs root.
netns-clean:
	scripts/netns-clean.sh
