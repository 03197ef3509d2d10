#!/bin/sh
# Enqueue one digest run per user for the day of this window. Safe to run any number of
# times: `--key` makes (digest, user:day) unique, so a second enqueue returns the first run.
set -eu
day=$(printf '%s' "${JOBCTL_SCHEDULED_FOR:-$(date -u +%FT%TZ)}" | cut -c1-10)
for user in ${DIGEST_USERS:-alice bob carol}; do
    jobctl run digest --key "$user:$day" --env USER_ID="$user"
done
