GO ?= go
BIN := bin/harnessflow

.PHONY: build test fuzz demo bench bench-produce vet

build:
	$(GO) build -o $(BIN) ./cmd/harnessflow

vet:
	$(GO) vet ./...

# The README's test command: vet, the race-enabled suite, and a few seconds of
# every fuzz target.
test: vet
	$(GO) test -race -shuffle=on -timeout 20m ./...
	$(MAKE) fuzz

FUZZTIME ?= 3s
fuzz:
	@for pkg in $$($(GO) list ./...); do \
	  for f in $$($(GO) test -list '^Fuzz' $$pkg 2>/dev/null | grep '^Fuzz'); do \
	    echo "fuzz $$pkg $$f"; \
	    $(GO) test -run='^$$' -fuzz="^$$f$$" -fuzztime=$(FUZZTIME) $$pkg || exit 1; \
	  done; \
	done

demo: build
	./$(BIN) up --demo

bench-produce: build
	./$(BIN) bench produce --embedded --events 200000
