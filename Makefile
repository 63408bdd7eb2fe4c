GO ?= go
BIN := bin/harnessflow

.PHONY: build deps test-deps test fuzz demo bench chaos bench-produce bench-critic vet compose-test

deps:
	@bash infra/scripts/ensure-deps.sh

test-deps:
	@bash infra/scripts/ensure-deps.sh --test

build:
	$(GO) build -o $(BIN) ./cmd/harnessflow

vet:
	$(GO) vet ./...

# The README's test command: vet, the race-enabled suite, and a few seconds of
# every fuzz target.
test: test-deps vet
	$(GO) test -race -shuffle=on -timeout 20m ./...
	$(MAKE) fuzz

# Both compose shapes (docker-compose.yml, then with docker-compose.cluster.yml)
# brought up by a real Docker engine that the test starts and stops itself,
# with infra/compose/stand-ins.yml for the images no registry serves here, a
# campaign sent through the composed ingest (infra/composetest). Needs root
# (dockerd) and the network to the Debian mirror and the Go module proxy;
# about 14 min on 2 cores with no image cached, 7 with the images kept
# (README.md, "Production deployment"). Not part of `make test`; .ci/run
# runs both.
compose-test:
	@bash infra/scripts/ensure-deps.sh --compose
	$(GO) vet -tags composetest ./infra/composetest
	bash infra/scripts/compose-test.sh

# An execution count, not a duration: with a duration, Go's fuzz coordinator
# can fail a target with a bare "context deadline exceeded" when its workers
# are starved at the deadline (a toolchain race, no input involved), which a
# loaded CI machine hits now and then. 10000 runs take about 2 to 5 s per
# target here. FUZZTIME=30s still works for a longer, timed session.
FUZZTIME ?= 10000x
# Every Fuzz target of every package, FUZZTIME each (seed corpora under testdata/fuzz).
fuzz:
	@set -e; for d in $$(grep -rl --include='*_test.go' '^func Fuzz' . | xargs -r -n1 dirname | sort -u); do \
	  for f in $$(grep -h '^func Fuzz' $$d/*_test.go | sed 's/^func \(Fuzz[A-Za-z0-9_]*\).*/\1/'); do \
	    echo "fuzz $$d $$f"; \
	    $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$d; \
	  done; \
	done

demo: deps build
	./$(BIN) up --demo

bench-produce: build
	./$(BIN) bench produce --embedded --events 200000

# The system-level proof (bench/README.md): end-to-end throughput, latency,
# memory and the side-by-side ceilings, written to bench/results/e2e.json.
bench: deps build
	./$(BIN) bench e2e

# The critic (issues 27, 36): the closed loop (picked-minus-random lift and
# within-round pairwise accuracy of K candidate updates per round, text
# signal on and off), the model against its baselines on held-out groups at
# 5-task rounds and at 25-task rounds with the simulator's content share at
# 0.3, 0.49 and 0.7, then the loop through the up stack's trainer and
# /v1/score; output in bench/results/critic.txt (bench/README.md, "The
# critic"). About 75 min on 2 cores.
bench-critic: build
	mkdir -p bench/results
	bash -o pipefail -c './$(BIN) bench critic $(CRITIC_FLAGS) | tee bench/results/critic.txt'
	bash -o pipefail -c './$(BIN) bench critic-offline $(CRITIC_FLAGS) | tee -a bench/results/critic.txt'
	for share in 0.3 0.49 0.7; do \
		echo "# bench critic-offline --scale 50 --sim-batch-size 25 --content-share $$share" | tee -a bench/results/critic.txt; \
		bash -o pipefail -c "./$(BIN) bench critic-offline --scale 50 --sim-batch-size 25 --content-share $$share $(CRITIC_FLAGS) | tee -a bench/results/critic.txt" || exit 1; \
	done
	bash -o pipefail -c './$(BIN) bench critic-service | tee -a bench/results/critic.txt'

# The fault campaign: kills, restarts, outages, Kafka errors and malformed
# input during one campaign; asserts nothing lost or duplicated and writes
# bench/results/chaos.json.
chaos: deps build
	./$(BIN) chaos
