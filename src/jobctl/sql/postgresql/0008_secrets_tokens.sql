-- 0008: secrets and API tokens (issue 42). A job names the secrets its attempts get
-- ({ENV: NAME}) and an environment file read at each attempt; the values live in
-- jobctl.secrets alone (never in a job, a run, a revision or an export); a token is kept
-- as the SHA-256 of its text, never the text.
ALTER TABLE jobctl.jobs ADD COLUMN secrets TEXT NOT NULL DEFAULT '{}';
ALTER TABLE jobctl.jobs ADD COLUMN env_file TEXT;

CREATE TABLE jobctl.secrets (
    name TEXT PRIMARY KEY,
    value BYTEA NOT NULL,
    updated_at BIGINT NOT NULL
);

CREATE TABLE jobctl.api_tokens (
    name TEXT PRIMARY KEY,
    role TEXT NOT NULL CHECK (role IN ('read', 'operate', 'admin')),
    sha256 TEXT NOT NULL UNIQUE,
    created_at BIGINT NOT NULL,
    last_used_at BIGINT
);
