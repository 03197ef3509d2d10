#!/bin/sh
# Enqueue one fetch per URL (one URL a line on stdin or in FILE). `--key` makes a URL
# enqueued twice run once; `--lock host:H` keeps one fetch per host at a time; URLs
# prefixed with '!' are urgent and jump the queue with a higher priority.
set -eu
cat "${1:--}" | while read -r url; do
    [ -n "$url" ] || continue
    prio=0
    case "$url" in '!'*) url=${url#!}; prio=10 ;; esac
    host=$(printf '%s' "$url" | sed -E 's#^[a-z]+://([^/:]+).*#\1#')
    jobctl run fetch --key "$url" --lock "host:$host" --env URL="$url" --priority "$prio"
done
