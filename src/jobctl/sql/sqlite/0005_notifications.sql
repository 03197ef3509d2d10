-- 0005: notifications (see jobctl(1), jobctl notify): channels, a job's --notify, --grace and --warn-after, the
-- outbox each notification is written to in the transaction of the change it reports, and
-- the delivered/failed counters that no retention lowers.
ALTER TABLE jobs ADD COLUMN notify TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobs ADD COLUMN grace_seconds REAL;
ALTER TABLE jobs ADD COLUMN warn_after_seconds REAL;

CREATE TABLE channels (
    name TEXT PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('webhook', 'email', 'command')),
    target TEXT NOT NULL,
    headers TEXT NOT NULL DEFAULT '[]',
    smtp TEXT,
    default_events TEXT NOT NULL DEFAULT '',
    created_at INTEGER NOT NULL
);

CREATE TABLE notifications (
    id INTEGER PRIMARY KEY AUTOINCREMENT,
    key TEXT NOT NULL UNIQUE,
    channel TEXT NOT NULL,
    cause TEXT NOT NULL,
    event TEXT NOT NULL CHECK (event IN ('failed', 'dead', 'succeeded', 'recovered', 'missed',
        'late', 'long', 'anomaly', 'paused')),
    job_id INTEGER,
    job_name TEXT,
    run_id INTEGER,
    attempt INTEGER,
    text TEXT NOT NULL,
    detail TEXT,
    state TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'sent', 'failed', 'dropped')),
    tries INTEGER NOT NULL DEFAULT 0,
    next_try_at INTEGER NOT NULL,
    leased_by TEXT,
    lease_until INTEGER,
    created_at INTEGER NOT NULL,
    sent_at INTEGER,
    ended_at INTEGER,
    last_error TEXT,
    UNIQUE (cause, channel)
);

CREATE INDEX notifications_due ON notifications (next_try_at) WHERE state = 'pending';
CREATE INDEX notifications_run ON notifications (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX notifications_job ON notifications (job_id, id);
CREATE INDEX notifications_ended ON notifications (state, ended_at);

CREATE TABLE notification_counts (
    channel TEXT NOT NULL,
    event TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('sent', 'failed')),
    n INTEGER NOT NULL,
    PRIMARY KEY (channel, event, state)
);
