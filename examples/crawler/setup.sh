#!/bin/sh
# The polite crawler: one `fetch` run per URL, at most one fetch per host at a time.
# Usage: sh examples/crawler/setup.sh   then   sh examples/crawler/enqueue.sh urls.txt
set -eu
here=$(cd "$(dirname "$0")" && pwd)
# --timeout frees a stuck host: the hung fetch is killed and its lock dies with its lease.
jobctl add fetch --manual --overlap allow --timeout 30s --retries 3 --backoff 5s --replace \
    --description "fetch one URL" \
    -- "$here/fetch.sh"
