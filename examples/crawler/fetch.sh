#!/bin/sh
# Fetch one URL into the crawl folder with curl (CRAWL_DRY_RUN=1: only pretend).
set -eu
: "${URL:?}"
dir=${CRAWL_DIR:-${TMPDIR:-/tmp}/jobctl-crawl}
mkdir -p "$dir"
name=$(printf '%s' "$URL" | tr -c 'A-Za-z0-9._-' '_')
if [ -z "${CRAWL_DRY_RUN:-}" ] && command -v curl >/dev/null 2>&1; then
    curl -fsS --max-time 20 -o "$dir/$name" "$URL"
else
    echo "would fetch $URL" > "$dir/$name"
fi
echo "fetched $URL (run $JOBCTL_RUN_ID, attempt $JOBCTL_ATTEMPT)"
