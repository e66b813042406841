#!/usr/bin/env bash
# Fails, listing them, if any of the repository's Go files is not gofmt'ed.
# Checks tracked files plus untracked ones that .gitignore does not exclude
# (on a fresh checkout that is exactly the tracked files).
set -euo pipefail
cd "$(dirname "${BASH_SOURCE[0]}")/.."

if git rev-parse --is-inside-work-tree >/dev/null 2>&1; then
	files=$(git ls-files --cached --others --exclude-standard -- '*.go')
else
	files=$(find . -name '*.go' -not -path './.git/*' -not -path './vendor/*')
fi
[[ -n $files ]] || exit 0
# Deleted-but-still-tracked files would make gofmt fail; skip them.
bad=$(while IFS= read -r f; do [[ -f $f ]] && printf '%s\0' "$f"; done <<<"$files" | xargs -0 -r gofmt -l)
if [[ -n $bad ]]; then
	echo "gofmt: these files need formatting (run gofmt -w):" >&2
	sed 's/^/  /' <<<"$bad" >&2
	exit 1
fi
