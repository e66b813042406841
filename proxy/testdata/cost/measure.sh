#!/bin/bash
# The start-up memory and per-request CPU of idem proxy on a generated
# document (issue 28 item 12; docs/RELIABILITY.md §10, docs/PERFORMANCE.md).
#
#   python3 gen_enum.py 1300000 /tmp/enum.json     # one enum of 1.3 million values
#   python3 gen_ops.py 5000 /tmp/ops.json          # 5,000 operations
#   python3 up.py 9311 &                           # the upstream
#   BIN=/tmp/idem ./measure.sh /tmp/enum.json 10 '{"code":"c1299999"}' /things
#   BIN=/tmp/idem ./measure.sh /tmp/ops.json 20 '{"thing":{"name":"a"}}' /r7/x
#
# It starts BIN proxy on DOC (SQLite in a temporary directory, the upstream
# at 127.0.0.1:9311), prints VmHWM and VmRSS a second after it listens,
# sends N POSTs of BODY to PATH and prints the CPU per request and the RSS
# after. IDEM_HEAPPROFILE=/tmp/heap.prof in the environment also writes a
# heap profile once it listens (go tool pprof -sample_index=inuse_space).
DOC=$1; N=${2:-10}; BODY=${3:-'{"code":"c0000005"}'}; P=${4:-/things}; BIN=${BIN:-idem}; PORT=${PORT:-8391}
DIR=$(mktemp -d); trap 'rm -rf "$DIR"' EXIT
printf 'sha256:%s acme agent-1 agent\n' "$(printf 'tok' | sha256sum | cut -d' ' -f1)" > "$DIR/tokens"
T0=$(date +%s.%N)
$BIN proxy --upstream http://127.0.0.1:9311 --openapi "$DOC" --tokens-file "$DIR/tokens" --addr 127.0.0.1:$PORT --store "sqlite:$DIR/m.db" --secret-key-file "$DIR/idem.key" > "$DIR/log" 2>&1 &
PID=$!
until grep -q listening "$DIR/log"; do sleep 0.05; kill -0 $PID 2>/dev/null || { cat "$DIR/log"; exit 1; }; done
T1=$(date +%s.%N)
tick=$(getconf CLK_TCK)
cpu() { awk -v t="$tick" '{print ($14+$15)/t}' /proc/$PID/stat; }
sleep 1
echo "start: $(echo "$T1 - $T0" | bc) s wall, cpu $(cpu) s, $(grep -E 'VmRSS|VmHWM' /proc/$PID/status | tr -s ' \n' ' ')"
C0=$(cpu)
for i in $(seq 1 "$N"); do
  curl -s -o /dev/null -w '%{http_code} ' -X POST "localhost:$PORT$P" -H 'Authorization: Bearer tok' -H 'Content-Type: application/json' -H "Idempotency-Key: k-$RANDOM-$i" -d "$BODY"
done; echo
echo "requests: $N, cpu/request $(echo "scale=4; ($(cpu) - $C0)/$N" | bc) s; $(grep -E 'VmRSS|VmHWM' /proc/$PID/status | tr -s ' \n' ' ')"
grep WARN "$DIR/log" | cut -c1-300
kill $PID; sleep 2; kill -9 $PID 2>/dev/null; wait $PID 2>/dev/null
