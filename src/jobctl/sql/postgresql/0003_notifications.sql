-- 0003: notifications (see jobctl(1), jobctl notify): channels, a job's --notify, --grace and --warn-after, the
-- outbox each notification is written to in the transaction of the change it reports, and
-- the delivered/failed counters that no retention lowers.
ALTER TABLE jobctl.jobs ADD COLUMN notify TEXT NOT NULL DEFAULT '[]';
ALTER TABLE jobctl.jobs ADD COLUMN grace_seconds DOUBLE PRECISION;
ALTER TABLE jobctl.jobs ADD COLUMN warn_after_seconds DOUBLE PRECISION;

CREATE TABLE jobctl.channels (
    name TEXT COLLATE "C" PRIMARY KEY,
    kind TEXT NOT NULL CHECK (kind IN ('webhook', 'email', 'command')),
    target TEXT NOT NULL,
    headers TEXT NOT NULL DEFAULT '[]',
    smtp TEXT,
    default_events TEXT NOT NULL DEFAULT '',
    created_at BIGINT NOT NULL
);

CREATE TABLE jobctl.notifications (
    id BIGINT GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
    key TEXT NOT NULL UNIQUE,
    channel TEXT NOT NULL,
    cause TEXT NOT NULL,
    event TEXT NOT NULL CHECK (event IN ('failed', 'dead', 'succeeded', 'recovered', 'missed',
        'late', 'long', 'anomaly', 'paused')),
    job_id BIGINT,
    job_name TEXT,
    run_id BIGINT,
    attempt INTEGER,
    text TEXT NOT NULL,
    detail TEXT,
    state TEXT NOT NULL DEFAULT 'pending'
        CHECK (state IN ('pending', 'sent', 'failed', 'dropped')),
    tries INTEGER NOT NULL DEFAULT 0,
    next_try_at BIGINT NOT NULL,
    leased_by TEXT,
    lease_until BIGINT,
    created_at BIGINT NOT NULL,
    sent_at BIGINT,
    ended_at BIGINT,
    last_error TEXT,
    UNIQUE (cause, channel)
);

CREATE INDEX notifications_due ON jobctl.notifications (next_try_at) WHERE state = 'pending';
CREATE INDEX notifications_run ON jobctl.notifications (run_id) WHERE run_id IS NOT NULL;
CREATE INDEX notifications_job ON jobctl.notifications (job_id, id);
CREATE INDEX notifications_ended ON jobctl.notifications (state, ended_at);

CREATE TABLE jobctl.notification_counts (
    channel TEXT NOT NULL,
    event TEXT NOT NULL,
    state TEXT NOT NULL CHECK (state IN ('sent', 'failed')),
    n BIGINT NOT NULL,
    PRIMARY KEY (channel, event, state)
);
