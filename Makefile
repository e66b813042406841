# make test is the one test command (CI: .ci/run). ARGS go to go test, e.g.
#   make test ARGS='-run Foo ./pgstore/'
.PHONY: test fmt-check vet build bench bench-quick scale reliability fuzz

# fmt-check, vet, then go test -race against a throwaway PostgreSQL.
test:
	scripts/test.sh $(ARGS)

fmt-check:
	scripts/fmt-check.sh

vet:
	go vet ./...

# bin/idem, naming each package as it compiles (-v): the first build of a
# fresh clone compiles every dependency, which takes minutes.
build:
	go build -v -o bin/idem ./cmd/idem

# The side-by-side benchmark of issue 9 (bench/README.md): SQLite, PostgreSQL
# and two instances on PostgreSQL, against the ceiling and the raw store
# limit. Results go to bench/results/. ARGS go to the harness, e.g.
#   make bench ARGS='--stores pg --clients 64'
bench:
	go run ./bench $(ARGS)

# The same in under a minute, for development.
bench-quick:
	go run ./bench --quick $(ARGS)

# The scale-out figures of docs/SCALE.md §7: measure one and two instances on
# PostgreSQL, then run the model (bench/sim) on that results file. ARGS go to
# the harness, SIM to the model, e.g. make scale SIM='--target 50000 --batch 8'
scale:
	go run ./bench --stores pg,pg2 $(ARGS)
	go run ./bench/sim $(SIM)

# The long runs of the reliability checks (docs/RELIABILITY.md): longer and
# more linearizability histories, 25 crash rounds per store, a 60 s soak,
# the outages and the sweeper across restarts. make test runs the short
# ones.
reliability:
	scripts/test.sh ./linearize/ -long $(ARGS)
	scripts/test.sh -run 'TestCrashLoop|TestSoak|TestSQLiteOutages|TestPostgresOutage|TestSweeperAcrossRestart|TestCrashAndRestart' -timeout 30m ./e2e/ -long $(ARGS)

# Coverage-guided fuzzing of every input from outside, FUZZTIME each
# (scripts/fuzz.sh holds the list; make test fuzzes each for 2 s).
FUZZTIME ?= 60s
fuzz:
	scripts/fuzz.sh $(FUZZTIME)
