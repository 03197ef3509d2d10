#!/bin/sh
# One user's digest. JOBCTL_RUN_ID is the idempotency key: a mail provider that accepts
# an idempotency header would get it, so a retry after a lost lease never sends twice.
set -eu
: "${USER_ID:?}"
out=${DIGEST_OUTBOX:-${TMPDIR:-/tmp}/jobctl-digest-outbox}
mkdir -p "$out"
case "$USER_ID" in
    *broken*) echo "no mailbox for $USER_ID" >&2; exit 1 ;;
esac
printf 'to=%s key=%s run=%s attempt=%s\n' "$USER_ID" "$JOBCTL_RUN_KEY" "$JOBCTL_RUN_ID" \
    "$JOBCTL_ATTEMPT" >> "$out/$USER_ID"
echo "digest sent to $USER_ID"
