#!/usr/bin/env bash
# measure.sh BINARY MODE: the peak RSS of `BINARY gateway` (an idem binary)
# in front of the hostile upstream MODE of gateway/testdata/rss, served by
# that program (json: a 200 MiB JSON answer to tools/call big; sse: the
# same as one SSE event; pages; tools; enum), measured by GNU time (%M)
# once the gateway is stopped. Run from the repository's root.
set -u
bin=$1; mode=$2; d=$(mktemp -d)
go build -o "$d/rss" ./gateway/testdata/rss || exit 1
printf 'sha256:%s o agent agent\n' "$(printf 'tok' | sha256sum | cut -d' ' -f1)" > "$d/tokens"
umode=$mode; [ "$mode" = json ] && umode=""
"$d/rss" "$umode" serve > "$d/url" & up=$!
for _ in $(seq 50); do [ -s "$d/url" ] && break; sleep 0.1; done
/usr/bin/time -f '%M' -o "$d/rss-kib" "$bin" gateway --upstream "$(cat "$d/url")" --tokens-file "$d/tokens" --addr 127.0.0.1:0 \
  --store "sqlite:$d/idem.db" --secret-key-file "$d/key" --reload-interval 0 2> "$d/log" & gw=$!
addr=""
for _ in $(seq 200); do
  addr=$(grep -o 'listening on http://[0-9.:]*' "$d/log" | head -1 | cut -d' ' -f3)
  [ -n "$addr" ] && break
  kill -0 $gw 2>/dev/null || break
  sleep 0.1
done
outcome="started"
if [ -z "$addr" ]; then
  if kill -0 $gw 2>/dev/null; then outcome="not started after 20 s"; else outcome="refused: $(grep -o 'tools/list[^"]*' "$d/log" | head -1 | cut -c1-200)"; fi
fi
if [ -n "$addr" ] && { [ "$mode" = json ] || [ "$mode" = sse ]; }; then
  code=$(curl -s -o "$d/out" -w '%{http_code}' -X POST "$addr/tools/big" -H 'Authorization: Bearer tok' -H 'Content-Type: application/json' -d '{}')
  outcome="$outcome; POST /tools/big: $code $(head -c 100 "$d/out" | tr -d '\n')…"
fi
child=$(ps --ppid $gw -o pid= | tr -d ' ')
[ -n "$child" ] && kill -INT "$child" 2>/dev/null
wait $gw 2>/dev/null
echo "$mode: peak RSS $(( $(tail -1 "$d/rss-kib") / 1024 )) MiB; $outcome"
kill $up 2>/dev/null
wait 2>/dev/null
rm -rf "$d"
