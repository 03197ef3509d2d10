#!/bin/sh
# The daily digest: a fan-out job at 08:00 that enqueues one keyed run per user.
# Usage: sh examples/digest/setup.sh   (uses $JOBCTL_DB or the default database)
set -eu
here=$(cd "$(dirname "$0")" && pwd)

# One digest per (user, day): the key makes a retried fan-out enqueue nothing twice.
# A failing user goes dead after its retries; the others are delivered.
jobctl add digest --manual --overlap allow --retries 2 --backoff 1m --replace \
    --description "send one user's daily digest" \
    -- "$here/send_digest.sh"

# The fan-out fires at 08:00; if the machine was off at 08:00 it runs once when the
# daemon comes back (--catchup once), not once per missed day.
jobctl add digest-fanout --cron '0 8 * * *' --catchup once --replace \
    --description "enqueue today's digests" \
    -- "$here/fanout.sh"
