#!/usr/bin/env bash
# The project's one test command: `make test` runs it, CI runs it via .ci/run.
#
#   scripts/test.sh [go test flags] [packages]
#   e.g. scripts/test.sh -run Foo ./pgstore/
#
# Runs the gofmt check, go vet and `go test -race -count=1`. Packages are the
# arguments that look like packages (., ./x, ../x, github.com/idem-run/idem, github.com/idem-run/idem/x); without any,
# ./... is vetted and tested, then every fuzz target runs for 2 s and is
# named in the summary with its result (see the end). Other arguments go to
# `go test` unchanged.
#
# PostgreSQL-backed tests (internal/pgtest) need a server. If
# IDEM_TEST_DATABASE_URL is set they use it: its role needs CREATEDB, since
# every test creates its own database. Otherwise this script starts a
# throwaway cluster in a temporary directory and removes it on exit.
# IDEM_TEST_REQUIRE_PG=1 is always exported, so a PostgreSQL test that cannot
# reach its server fails instead of skipping.
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

say() { printf 'test.sh: %s\n' "$@" >&2; }
die() {
	local rc=$1
	shift
	say "$@"
	exit "$rc"
}

# ---- Checks that need no database. ----------------------------------------

pkgs=()
for a in "$@"; do
	case $a in
	. | ./* | .. | ../* | github.com/idem-run/idem | github.com/idem-run/idem/*) pkgs+=("$a") ;;
	esac
done
default_pkgs=()
((${#pkgs[@]})) || default_pkgs=(./...)

# Say up front what a run fetches and where: nothing is written into the
# repository.
say "fetches on first use, outside the repository: Go modules and gotestsum (go.mod's tool) into $(go env GOMODCACHE);" \
	"@redocly/cli into ${IDEM_REDOCLY_CACHE:-${XDG_CACHE_HOME:-$HOME/.cache}/idem} (full runs, scripts/openapi-lint.sh);" \
	"the gateway tests' npm MCP servers, TypeScript SDK and MCP Inspector into ${XDG_CACHE_HOME:-$HOME/.cache}/idem-e2e (e2e/gateway_test.go, e2e/gateway_inspector_test.go)"
scripts/fmt-check.sh
# -v: with a cold build cache vet first compiles every package it checks
# (minutes), naming each as it goes; it prints nothing when they are cached.
say "go vet -v ${pkgs[*]:-./...} (names each package it compiles, quiet when cached)"
go vet -v "${pkgs[@]:-./...}"

# Catalog drift (docs/catalog-drift.md), on a full run only: the catalog that
# `idem serve --demo` serves from this code, against the committed snapshot
# cmd/idem/testdata/catalog.demo.json. A demo contract that widened (or
# narrowed) fails here until scripts/catalog-drift.sh --update rewrites the
# snapshot in the same change, where review sees it.
((${#pkgs[@]})) || scripts/catalog-drift.sh

# The OpenAPI lint (docs/http.md), on a full run only: Redocly's recommended
# rules, at a pinned version installed outside the repository, over the
# committed snapshots of the demo's and the proxy's documents (the Go tests
# keep those current). Skipped, saying so, without node and npm; required
# when CI=true.
((${#pkgs[@]})) || scripts/openapi-lint.sh

# ---- PostgreSQL. ------------------------------------------------------------

# pg_bindir prints the directory holding initdb, pg_ctl and postgres.
pg_bindir() {
	local d p
	if command -v pg_config >/dev/null 2>&1 && d=$(pg_config --bindir 2>/dev/null) && [[ -x $d/initdb ]]; then
		echo "$d"
		return 0
	fi
	if p=$(command -v initdb 2>/dev/null); then
		dirname "$(readlink -f "$p")" # /usr/local/bin/initdb may be a symlink
		return 0
	fi
	for d in $(printf '%s\n' /usr/lib/postgresql/*/bin | sort -V -r); do
		if [[ -x $d/initdb ]]; then
			echo "$d"
			return 0
		fi
	done
	return 1
}

install_pg() {
	say "no PostgreSQL found; CI=true and running as root: installing Debian's postgresql package"
	export DEBIAN_FRONTEND=noninteractive
	apt-get update -q
	# Keep the package from creating and starting its own "main" cluster on
	# port 5432: the tests use a throwaway one.
	apt-get install -y -q --no-install-recommends postgresql-common
	sed -i -E 's/^#?[[:space:]]*create_main_cluster[[:space:]]*=.*/create_main_cluster = false/' \
		/etc/postgresql-common/createcluster.conf || true
	apt-get install -y -q --no-install-recommends postgresql
}

# ---- Chromium (the web console's browser tests, e2e/ui_test.go). ----------

# In CI as root, a missing /usr/bin/chromium is installed, and
# IDEM_TEST_REQUIRE_BROWSER=1 turns the browser test's skip into a failure.
# Elsewhere the test skips, saying why, when no chromium is found.
if [[ ${CI:-} == true && $EUID -eq 0 ]]; then
	if [[ ! -x /usr/bin/chromium ]] && command -v apt-get >/dev/null 2>&1; then
		say "no /usr/bin/chromium; CI=true and running as root: installing Debian's chromium package"
		DEBIAN_FRONTEND=noninteractive apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends chromium
	fi
	export IDEM_TEST_REQUIRE_BROWSER=1
fi

# ---- The walk-throughs' tools (e2e/walkthrough_test.go). ------------------

# The doc walk-throughs run with bash, curl, jq and python3; without them the
# test skips, saying why, except in CI (CI=true), where it fails. In CI as
# root, missing curl and jq are installed.
if [[ ${CI:-} == true && $EUID -eq 0 ]] && command -v apt-get >/dev/null 2>&1; then
	missing=()
	for tool in curl jq; do
		command -v "$tool" >/dev/null 2>&1 || missing+=("$tool")
	done
	if ((${#missing[@]})); then
		say "no ${missing[*]}; CI=true and running as root: installing Debian's ${missing[*]} package(s) for the walk-through test"
		DEBIAN_FRONTEND=noninteractive apt-get update -q
		DEBIAN_FRONTEND=noninteractive apt-get install -y -q --no-install-recommends "${missing[@]}"
	fi
fi

# ---- Node (idem gateway's tests against npm MCP servers, e2e/gateway_test.go). ----

# The tests install pinned MCP servers from npm into the user cache and run
# them with node; without node and npm they skip, saying why, except in CI,
# where IDEM_TEST_REQUIRE_NODE=1 turns the skip into a failure.
if [[ ${CI:-} == true ]]; then
	export IDEM_TEST_REQUIRE_NODE=1
fi

no_pg() {
	cat >&2 <<-'EOF'
		test.sh: no PostgreSQL server binaries found (looked at `pg_config --bindir`,
		initdb on PATH, /usr/lib/postgresql/*/bin). Either install PostgreSQL 13 or later:
		    Debian/Ubuntu:  sudo apt-get install postgresql
		    Fedora:         sudo dnf install postgresql-server
		    macOS:          brew install postgresql@17
		and run `make test` again (it starts and removes a throwaway cluster by itself;
		no server needs to be running), or point the tests at an existing server whose
		role has CREATEDB (every test creates, then drops, a database of its own):
		    IDEM_TEST_DATABASE_URL='postgres://user:pass@host:port/db?sslmode=disable' make test
	EOF
	exit 2
}

# free_port prints a TCP port in 20000-60000 that nothing on 127.0.0.1 accepts on.
free_port() {
	local port
	for _ in {1..200}; do
		port=$((20000 + ((RANDOM << 15) | RANDOM) % 40001))
		if ! (exec 3<>"/dev/tcp/127.0.0.1/$port") 2>/dev/null; then
			echo "$port"
			return 0
		fi
	done
	return 1
}

# as_user runs a command inside $tmp as $run_user: PostgreSQL refuses to run
# as root. Without $run_user (not root) it runs the command directly.
as_user() {
	(
		cd "$tmp"
		if [[ -z $run_user ]]; then
			"$@"
		elif command -v runuser >/dev/null 2>&1; then
			runuser -u "$run_user" -- "$@"
		else
			su -s /bin/sh "$run_user" -c "$(printf '%q ' "$@")"
		fi
	)
}

tmp=""
gotestsum=""
watch_pid=""
started=""
run_user=""
pg_ctl=""
test_pid=""

# stop_tests ends the go test process group (go, compilers, test binaries):
# signal sig, then SIGKILL after 10 s. It runs from traps, so nothing in it
# may trip set -e.
stop_tests() {
	local sig=$1
	[[ -n $test_pid ]] || return 0
	kill -"$sig" -- "-$test_pid" 2>/dev/null || :
	for _ in {1..100}; do
		kill -0 "$test_pid" 2>/dev/null || break
		sleep 0.1
	done
	kill -KILL -- "-$test_pid" 2>/dev/null || :
	wait "$test_pid" 2>/dev/null || :
	test_pid=""
}

# cleanup runs on every exit: normal, failed tests, errors and signals. It
# keeps the exit status.
cleanup() {
	local rc=$?
	trap - EXIT INT TERM HUP
	set +e
	stop_tests TERM
	if [[ -n $watch_pid ]]; then
		kill "$watch_pid" 2>/dev/null
	fi
	if [[ -n $started ]]; then
		as_user "$pg_ctl" -D "$tmp/data" -m immediate -w -t 30 stop >/dev/null 2>&1
		# Should pg_ctl fail, do not leave a postmaster behind.
		if [[ -f $tmp/data/postmaster.pid ]]; then
			kill -KILL "$(head -n1 "$tmp/data/postmaster.pid")" 2>/dev/null
		fi
	fi
	if [[ -n $tmp ]]; then
		rm -rf "$tmp"
	fi
	if [[ -n $gotestsum ]]; then
		rm -rf "$(dirname "$gotestsum")"
	fi
	exit "$rc"
}

start_pg() {
	local bindir initdb postgres pg_isready t0 version port attempt opts deadline log ms
	t0=${EPOCHREALTIME//[.,]/}
	if ! bindir=$(pg_bindir); then
		if [[ $EUID -eq 0 && ${CI:-} == true ]] && command -v apt-get >/dev/null 2>&1; then
			install_pg
			bindir=$(pg_bindir) || no_pg
		else
			no_pg
		fi
	fi
	initdb=$bindir/initdb pg_ctl=$bindir/pg_ctl postgres=$bindir/postgres pg_isready=$bindir/pg_isready
	[[ -x $pg_ctl && -x $postgres ]] || die 2 "$bindir has initdb but not pg_ctl and postgres; install the PostgreSQL server package."
	[[ -x $pg_isready ]] || pg_isready=$(command -v pg_isready) || die 2 "pg_isready not found (looked in $bindir and on PATH)."
	version=$("$postgres" -V)
	version=${version#postgres (PostgreSQL) }

	if [[ $EUID -eq 0 ]]; then
		if id -u postgres >/dev/null 2>&1; then run_user=postgres; else run_user=nobody; fi
	fi

	tmp=$(mktemp -d "${TMPDIR:-/tmp}/idem-pg.XXXXXX")
	if [[ -n $run_user ]]; then
		chown "$run_user:" "$tmp"
		as_user test -w "$tmp" 2>/dev/null ||
			die 1 "user $run_user cannot write $tmp; set TMPDIR to a directory $run_user can reach (e.g. /tmp)."
	fi

	# -A trust: local and 127.0.0.1 connections need no password.
	if ! as_user "$initdb" -D "$tmp/data" -U idem -A trust -E UTF8 --locale=C --no-sync >"$tmp/initdb.log" 2>&1; then
		cat "$tmp/initdb.log" >&2
		die 1 "initdb failed (above)."
	fi
	as_user mkdir "$tmp/sock"

	for attempt in 1 2 3; do
		port=$(free_port) || die 1 "found no free TCP port on 127.0.0.1."
		# fsync, synchronous_commit and full_page_writes are off for speed: the
		# cluster is thrown away after the run, so durability buys nothing.
		# max_connections leaves room for parallel test packages and pools.
		opts="-c listen_addresses=127.0.0.1 -c port=$port -k '$tmp/sock'"
		opts+=" -c fsync=off -c synchronous_commit=off -c full_page_writes=off -c max_connections=300"
		log=$tmp/postgres.$attempt.log
		started=1
		# -W: don't wait here; pg_isready below decides when the server is ready.
		as_user "$pg_ctl" -D "$tmp/data" -l "$log" -o "$opts" -W start >/dev/null
		deadline=$((SECONDS + 30))
		until "$pg_isready" -q -h 127.0.0.1 -p "$port" -U idem -d postgres -t 2; do
			if grep -q 'could not create any TCP/IP sockets' "$log" 2>/dev/null; then
				continue 2 # lost a race for the port: try another
			fi
			if ((SECONDS >= deadline)); then
				cat "$log" >&2 2>/dev/null
				die 1 "PostgreSQL $version (in $tmp, port $port) was not ready after 30 s; its log is above."
			fi
			sleep 0.1
		done
		IDEM_TEST_DATABASE_URL="postgres://idem@127.0.0.1:$port/postgres?sslmode=disable"
		ms=$(((${EPOCHREALTIME//[.,]/} - t0) / 1000))
		say "started throwaway PostgreSQL $version on 127.0.0.1:$port as ${run_user:-$(id -un)} in ${ms} ms ($tmp, removed on exit)"
		return 0
	done
	cat "$log" >&2
	die 1 "PostgreSQL could not bind a port in $attempt attempts; its log is above."
}

trap cleanup EXIT
trap 'stop_tests INT; exit 130' INT
trap 'stop_tests TERM; exit 143' TERM
trap 'stop_tests HUP; exit 129' HUP

if [[ -n ${IDEM_TEST_DATABASE_URL:-} ]]; then
	say "using IDEM_TEST_DATABASE_URL=$(sed -E 's#(://[^:/@]*):[^@]*@#\1:****@#; s#(password=)[^ &]*#\1****#g' <<<"$IDEM_TEST_DATABASE_URL")"
else
	start_pg
fi
export IDEM_TEST_DATABASE_URL
export IDEM_TEST_REQUIRE_PG=1

# go test runs in the background, in its own process group (set -m), so that
# a signal to this script is handled at once -- bash would otherwise run the
# traps only after go test ends -- and reaches all of go test's processes
# (Ctrl-C does so through the INT trap). wait keeps go test's exit status.
#
# It runs under gotestsum (a tool dependency in go.mod, built below
# from the module cache) in its testname format: a line per test and subtest
# as it finishes ("PASS pkg.TestX (1.20s)"), a failed test's output as it
# fails, and a line per package as the package finishes ("EMPTY pkg" for one
# without tests), so a long package such as e2e/ prints as it goes instead
# of once at its end (issue 37: output at least every 30 s;
# the README gives the measured longest gap). GOTESTSUM_FORMAT picks another
# format, e.g. pkgname-and-test-fails for a line per package only. Then a
# summary: every skipped test with its reason, every failure with its output,
# and the closing "DONE N tests, M skipped, K failures in Xs" line. The "figures:" lines
# tests log (counts, sizes, latencies under load) follow it, headed.
# Compiling with the race detector is most of a cold run: on a full run it
# is done first, naming each package as it compiles (nothing when the build
# cache has them all), so that a first run is not minutes of silence. go
# test reuses what it compiled. A build error fails here, as go test would.
if ((${#default_pkgs[@]})); then
	say "go build -race -v ./... (compiles what the tests need, naming each package; quiet when cached)"
	go build -race -v ./...
fi
# e2e/'s TestMain builds cmd/idem (without -race) before its first test,
# silently: on a full run or one naming e2e/, build it here first, naming
# each package it compiles, so that TestMain finds them cached and only
# links.
if ((${#default_pkgs[@]})) || [[ " ${pkgs[*]} " == *e2e* ]]; then
	say "go build -v ./cmd/idem (the binary e2e/ runs; names each package it compiles, quiet when cached)"
	go build -v -o /dev/null ./cmd/idem
fi

# gotestsum (go.mod's tool) is built here, naming each package it
# compiles, rather than by `go tool gotestsum`, which compiles it silently
# on first use (128 s with an empty build cache on a loaded 2-core machine).
gotestsum=$(mktemp -d "${TMPDIR:-/tmp}/idem-gotestsum.XXXXXX")/gotestsum
say "go build -v gotest.tools/gotestsum (go.mod's tool, into a temporary directory; names each package it compiles)"
go build -v -o "$gotestsum" gotest.tools/gotestsum

# running prints the top-level tests that started and have not finished,
# from go test -json's events in $log, as pkg.TestX, at most 6 of them.
running() {
	awk -v mod=github.com/idem-run/idem '
		{ a = p = t = "" }
		match($0, /"Action":"[a-z-]*"/) { a = substr($0, RSTART + 10, RLENGTH - 11) }
		match($0, /"Package":"[^"]*"/) { p = substr($0, RSTART + 11, RLENGTH - 12) }
		match($0, /"Test":"[^"\/]*"/) { t = substr($0, RSTART + 8, RLENGTH - 9) }
		t == "" { next }
		{ if (p == mod) p = ""; else { sub("^" mod "/", "", p); p = p "." } }
		a == "run" { r[p t] = 1 }
		a == "pass" || a == "fail" || a == "skip" { delete r[p t] }
		END {
			k = 0
			for (x in r) if (++k <= 6) out = out (k > 1 ? ", " : "") x
			if (k > 6) out = out " and " k - 6 " more"
			print out
		}' "$log"
}

# quiet_watch runs beside gotestsum: whenever no test, subtest or package
# has finished for 20 s (gotestsum prints a line for each; packages only
# for another GOTESTSUM_FORMAT), it says what go test is doing: the tests
# still running, or, when none is, compiling and linking test binaries. So
# a long test, or the linking of many test binaries with the race
# detector, is never more than about 20 s of silence.
quiet_watch() {
	local seen=0 size quiet=0 said=0 now finished='"Action":"\(pass\|fail\|skip\)"'
	# Another format may print a line per package only: count packages.
	[[ ${GOTESTSUM_FORMAT:-testname} == testname ]] || finished+=',"Package":"[^"]*","Elapsed"'
	while sleep 2; do
		size=$(wc -c <"$log")
		if ((size > seen)); then
			# grep reads it all (-q would end the pipe early: pipefail).
			if tail -c +"$((seen + 1))" "$log" | grep "$finished" >/dev/null; then
				quiet=0 said=0
			fi
			seen=$size
		fi
		((quiet += 2))
		if ((quiet - said >= 20)); then
			now=$(running)
			say "nothing finished in $quiet s; ${now:+still running: }${now:-compiling and linking test binaries}"
			said=$quiet
		fi
	done
}

log=$(mktemp "${TMPDIR:-/tmp}/idem-test.XXXXXX")
say "go test -race -count=1 ${default_pkgs[*]} $* (through gotestsum: a line per test as it finishes, then every skip with its reason)"
set -m
"$gotestsum" --format "${GOTESTSUM_FORMAT:-testname}" --format-icons text --jsonfile "$log" -- \
	-race -count=1 "${default_pkgs[@]}" "$@" &
test_pid=$!
set +m
quiet_watch &
watch_pid=$!
rc=0
wait "$test_pid" || rc=$?
test_pid=""
kill "$watch_pid" 2>/dev/null || :
wait "$watch_pid" 2>/dev/null || :
watch_pid=""
# Each figures line, from the Output field of go test -json's events.
figures=$(sed -n 's/.*"Output":" *\([a-z_]*_test\.go:[0-9]*: figures: .*\)\\n"}$/\1/p' "$log" | sed 's/\\"/"/g; s/\\t/\t/g')
if [[ -n $figures ]]; then
	say "figures the tests logged:"
	printf '%s\n' "$figures"
fi
rm -f "$log"

# ---- A short fuzz run. --------------------------------------------------------

# After a full run that passed (no packages named), every fuzz target of
# scripts/fuzz.sh (make fuzz) runs for IDEM_TEST_FUZZTIME each (2s; 0 skips).
# The summary ends with one line per target, its result, time and figures
# (a failing target's whole output comes first).
fuzztime=${IDEM_TEST_FUZZTIME:-2s}
if ((rc != 0)); then
	: # the tests failed: no fuzzing
elif ((!${#default_pkgs[@]})); then
	say "no fuzzing: packages were named (run without them to fuzz every target)"
elif [[ $fuzztime == 0 ]]; then
	say "no fuzzing: IDEM_TEST_FUZZTIME=0"
else
	say "fuzzing each target for $fuzztime (IDEM_TEST_FUZZTIME)"
	set -m
	IDEM_FUZZ_QUIET=1 scripts/fuzz.sh "$fuzztime" &
	test_pid=$!
	set +m
	wait "$test_pid" || rc=$?
	test_pid=""
fi
exit "$rc"
