# make test is the one test command (CI: .ci/run). ARGS go to go test, e.g.
#   make test ARGS='-run Foo ./pgstore/'
.PHONY: test fmt-check vet build

# fmt-check, vet, then go test -race against a throwaway PostgreSQL.
test:
	scripts/test.sh $(ARGS)

fmt-check:
	scripts/fmt-check.sh

vet:
	go vet ./...

build:
	go build -o bin/idem ./cmd/idem
