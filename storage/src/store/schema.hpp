// schema.hpp (private): the SQL text of every migration, in order. Migration i (1-based) moves
// a file from user_version i-1 to i. docs/storage-format.md section 4 lists the same SQL;
// tests/storage/schema_doc_test.cpp fails when they differ in a table, column, index or trigger.
#pragma once

namespace factum::schema {

/// Version 1: meta, facts (immutable, chained), idempotency keys, alarms.
inline constexpr const char* v1 = R"sql(
CREATE TABLE meta(
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE facts(
  seq             INTEGER PRIMARY KEY,
  fact_id         TEXT NOT NULL UNIQUE,
  type            TEXT NOT NULL,
  subtype         TEXT,
  ts              INTEGER NOT NULL,
  tool_id         TEXT,
  config_id       TEXT,
  config_version  INTEGER,
  trace_id        TEXT,
  idempotency_key TEXT,
  amount          TEXT,
  currency        TEXT,
  from_entity     TEXT,
  to_entity       TEXT,
  data            TEXT NOT NULL,
  prev_hash       TEXT NOT NULL,
  hash            TEXT NOT NULL
);
CREATE INDEX facts_by_type  ON facts(type, subtype);
CREATE INDEX facts_by_ts    ON facts(ts);
CREATE INDEX facts_by_trace ON facts(trace_id) WHERE trace_id IS NOT NULL;
CREATE INDEX facts_by_tool  ON facts(tool_id) WHERE tool_id IS NOT NULL;
CREATE INDEX facts_by_key   ON facts(idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TRIGGER facts_no_update BEFORE UPDATE ON facts
BEGIN SELECT RAISE(ABORT, 'facts are immutable: UPDATE refused'); END;
CREATE TRIGGER facts_no_delete BEFORE DELETE ON facts
BEGIN SELECT RAISE(ABORT, 'facts are immutable: DELETE refused'); END;
CREATE TRIGGER facts_chain BEFORE INSERT ON facts
WHEN NEW.seq IS NOT (SELECT COALESCE(MAX(seq), 0) + 1 FROM facts)
  OR NEW.prev_hash IS NOT COALESCE((SELECT hash FROM facts WHERE seq = NEW.seq - 1),
                                   '0000000000000000000000000000000000000000000000000000000000000000')
BEGIN SELECT RAISE(ABORT, 'facts: seq must follow the last fact and prev_hash must equal its hash'); END;

CREATE TABLE idempotency_keys(
  key         TEXT PRIMARY KEY,
  status      TEXT NOT NULL CHECK (status IN ('pending', 'completed', 'failed')),
  fingerprint TEXT NOT NULL,
  response    TEXT,
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys(expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX idempotency_keys_pending ON idempotency_keys(key) WHERE status = 'pending';

CREATE TABLE alarms(
  name       TEXT PRIMARY KEY,
  due_at     INTEGER NOT NULL,
  payload    TEXT NOT NULL,
  attempts   INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX alarms_by_due ON alarms(due_at);
)sql";

/// Version 2: dead letters, circuit breakers, versioned configs.
inline constexpr const char* v2 = R"sql(
CREATE TABLE dead_letters(
  id               TEXT PRIMARY KEY,
  operation        TEXT NOT NULL,
  payload          TEXT NOT NULL,
  idempotency_key  TEXT,
  config_id        TEXT,
  config_version   INTEGER,
  error_code       TEXT NOT NULL,
  error_message    TEXT NOT NULL,
  error_category   TEXT NOT NULL,
  reason           TEXT NOT NULL,
  attempts         INTEGER NOT NULL,
  first_attempt_at INTEGER NOT NULL,
  last_attempt_at  INTEGER NOT NULL,
  trace_id         TEXT,
  status           TEXT NOT NULL
    CHECK (status IN ('pending', 'scheduled', 'resolved', 'discarded', 'acknowledged')),
  next_retry_at    INTEGER,
  expires_at       INTEGER,
  created_at       INTEGER NOT NULL,
  updated_at       INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX dead_letters_by_status ON dead_letters(status, created_at);

CREATE TABLE breakers(
  tool_id    TEXT PRIMARY KEY,
  state      TEXT NOT NULL
    CHECK (state IN ('CLOSED', 'OPEN', 'HALF_OPEN', 'FORCED_OPEN', 'DISABLED')),
  data       TEXT NOT NULL,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;

CREATE TABLE configs(
  config_id  TEXT NOT NULL,
  version    INTEGER NOT NULL CHECK (version >= 1),
  body       TEXT NOT NULL,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (config_id, version)
) WITHOUT ROWID;
CREATE TRIGGER configs_no_update BEFORE UPDATE ON configs
BEGIN SELECT RAISE(ABORT, 'config versions are immutable: UPDATE refused'); END;
CREATE TRIGGER configs_no_delete BEFORE DELETE ON configs
BEGIN SELECT RAISE(ABORT, 'config versions are immutable: DELETE refused'); END;
)sql";

/// Version 3: the chain is enforced by the store and checked by verify(), not by an INSERT
/// trigger (any INSERT trigger makes SQLite keep a statement journal for every insert: ~2 us
/// per fact); facts_by_type becomes (type) so that a query by type walks it in seq order and
/// stops at its limit, and (type, subtype) moves to a partial index.
inline constexpr const char* v3 = R"sql(
DROP TRIGGER IF EXISTS facts_chain;
DROP INDEX IF EXISTS facts_by_type;
CREATE INDEX facts_by_type    ON facts(type);
CREATE INDEX facts_by_subtype ON facts(type, subtype) WHERE subtype IS NOT NULL;
)sql";

/// Version 4: fact ids are derived from a per-file prefix and the seq (`fct_` + 16 hex digits
/// of the file's `fact_id_prefix` + 12 hex digits of seq), so a new file needs no index on
/// fact_id: a lookup by id is a rowid lookup. A file migrated from an older version keeps its
/// UNIQUE index on fact_id (the ids it already holds are random) and records the last seq that
/// has an old-style id; its later facts get derived ids.
inline constexpr const char* v4 = R"sql(
INSERT INTO meta(key, value) VALUES
  ('fact_id_prefix', 'fct_' || lower(hex(randomblob(8)))),
  ('fact_id_legacy_until', (SELECT COALESCE(MAX(seq), 0) FROM facts));
)sql";

/// Version 5: a dead letter counts the retries run for it since it was made or an operator last
/// retried it (`auto_retries`), so that automatic retries stop at their rule's cap.
inline constexpr const char* v5 = R"sql(
ALTER TABLE dead_letters ADD COLUMN auto_retries INTEGER NOT NULL DEFAULT 0;
)sql";

/// Version 6: the owner history of cluster mode (docs/storage-format.md section 15): one row per
/// claim that raised the file's owner epoch, append-only. The current owner epoch is the largest
/// `epoch` (0 without rows); every write transaction of a store holding a claim reads it.
inline constexpr const char* v6 = R"sql(
CREATE TABLE owners(
  epoch      INTEGER PRIMARY KEY CHECK (epoch > 0),
  node       TEXT NOT NULL CHECK (node <> ''),
  first_seq  INTEGER NOT NULL CHECK (first_seq >= 1),
  claimed_ms INTEGER NOT NULL
);
CREATE TRIGGER owners_no_update BEFORE UPDATE ON owners
BEGIN SELECT RAISE(ABORT, 'owners are append-only: UPDATE refused'); END;
CREATE TRIGGER owners_no_delete BEFORE DELETE ON owners
BEGIN SELECT RAISE(ABORT, 'owners are append-only: DELETE refused'); END;
CREATE TRIGGER owners_increase BEFORE INSERT ON owners
WHEN NEW.epoch <= (SELECT COALESCE(MAX(epoch), 0) FROM owners)
BEGIN SELECT RAISE(ABORT, 'owners: an epoch must be greater than every epoch before it'); END;
)sql";

/// Version 7: the journal of durable execution (docs/storage-format.md section 16): one row per
/// awaited step of a journaled call (a call with an idempotency key, an alarm, a dead letter's
/// retry), written when the step starts and completed with its result, so that a retry of the
/// call after a crash replays what was recorded instead of running it again.
inline constexpr const char* v7 = R"sql(
CREATE TABLE journal(
  key         TEXT NOT NULL CHECK (key <> ''),
  step        INTEGER NOT NULL CHECK (step >= 1),
  kind        TEXT NOT NULL CHECK (kind IN ('tool', 'call', 'sleep')),
  what        TEXT NOT NULL,
  fingerprint TEXT NOT NULL,
  entries     TEXT NOT NULL,
  result      TEXT,
  runs        INTEGER NOT NULL CHECK (runs >= 1),
  started_at  INTEGER NOT NULL,
  finished_at INTEGER,
  PRIMARY KEY (key, step)
) WITHOUT ROWID;
)sql";

/// Version 8: recurring schedules (docs/storage-format.md section 17): one row per schedule
/// with its spec, payload and next scheduled time; each fires through the alarm
/// `@schedule:<name>`, which the runtime keeps in step with the row.
inline constexpr const char* v8 = R"sql(
CREATE TABLE schedules(
  name       TEXT PRIMARY KEY,
  spec       TEXT NOT NULL,
  payload    TEXT NOT NULL,
  next_at    INTEGER NOT NULL,
  last_at    INTEGER,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

/// Version 9: the outbox (docs/storage-format.md section 18): one row per sink this entity's
/// facts are relayed to, with the seq of the last fact the sink acknowledged (or that was
/// dead-lettered) and the backoff of a failing delivery. The runtime advances a row only after
/// its sink acknowledged, in an ordinary commit of the entity.
inline constexpr const char* v9 = R"sql(
CREATE TABLE outbox_cursors(
  sink       TEXT PRIMARY KEY,
  seq        INTEGER NOT NULL CHECK (seq >= 0),
  attempts   INTEGER NOT NULL CHECK (attempts >= 0),
  next_at    INTEGER NOT NULL,
  last_error TEXT,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

/// Version 10: a file's fact ids may be numbered under several prefixes. A rollback numbers the
/// facts after its bookmark under a new prefix (so that no fact id is ever given twice), and the
/// meta row `fact_id_history` keeps every prefix with the seq it began at and the one it follows
/// (docs/storage-format.md section 6); the version keeps a build that knows one prefix per file
/// from misreading a rolled-back file's ids. And paused alarms and schedules (section 21): a
/// fork's, which wait there, with the columns of `alarms` and `schedules`, until an operator
/// resumes them (a fork must not run its source's side effects again on its own).
inline constexpr const char* v10 = R"sql(
CREATE TABLE paused_alarms(
  name       TEXT PRIMARY KEY,
  due_at     INTEGER NOT NULL,
  payload    TEXT NOT NULL,
  attempts   INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE TABLE paused_schedules(
  name       TEXT PRIMARY KEY,
  spec       TEXT NOT NULL,
  payload    TEXT NOT NULL,
  next_at    INTEGER NOT NULL,
  last_at    INTEGER,
  created_at INTEGER NOT NULL,
  updated_at INTEGER NOT NULL
) WITHOUT ROWID;
)sql";

inline constexpr const char* migrations[] = {v1, v2, v3, v4, v5, v6, v7, v8, v9, v10};

/// The first schema version with the `owners` table.
inline constexpr int owners_version = 6;
/// The first schema version with the `journal` table.
inline constexpr int journal_version = 7;
/// The first schema version with the `schedules` table.
inline constexpr int schedules_version = 8;
/// The first schema version with the `outbox_cursors` table.
inline constexpr int outbox_version = 9;
/// The first schema version whose fact ids may have several prefixes (meta fact_id_history),
/// and with the tables `paused_alarms` and `paused_schedules`.
inline constexpr int fact_id_history_version = 10;
inline constexpr int paused_version = 10;

/// What an open releases: the keys an activation that is gone left pending, except (from
/// version 7) those whose call has a journal, which a retry resumes.
inline constexpr char release_pending_sql[] = "DELETE FROM idempotency_keys WHERE status='pending'";
inline constexpr char release_unjournaled_sql[] =
  "DELETE FROM idempotency_keys WHERE status='pending' AND "
  "'key:' || key NOT IN (SELECT key FROM journal)";

/// Migration 1 as a new file gets it at version 4: the same tables, indexes and triggers that
/// migrations 1, 3 and 4 leave, except that `facts.fact_id` has no UNIQUE constraint (and so no
/// index). A new file is built from `fresh_v1` + `v2` + `v5` to `v10` (fewer statements
/// to parse than replaying every migration, which matters for creation time); the meta rows are
/// written by the builder. A test checks that a new file and one migrated from version 1 have the
/// same tables, columns, indexes and triggers, apart from that constraint.
inline constexpr const char* fresh_v1 = R"sql(
CREATE TABLE meta(
  key   TEXT PRIMARY KEY,
  value TEXT NOT NULL
) WITHOUT ROWID;

CREATE TABLE facts(
  seq             INTEGER PRIMARY KEY,
  fact_id         TEXT NOT NULL,
  type            TEXT NOT NULL,
  subtype         TEXT,
  ts              INTEGER NOT NULL,
  tool_id         TEXT,
  config_id       TEXT,
  config_version  INTEGER,
  trace_id        TEXT,
  idempotency_key TEXT,
  amount          TEXT,
  currency        TEXT,
  from_entity     TEXT,
  to_entity       TEXT,
  data            TEXT NOT NULL,
  prev_hash       TEXT NOT NULL,
  hash            TEXT NOT NULL
);
CREATE INDEX facts_by_type    ON facts(type);
CREATE INDEX facts_by_subtype ON facts(type, subtype) WHERE subtype IS NOT NULL;
CREATE INDEX facts_by_ts    ON facts(ts);
CREATE INDEX facts_by_trace ON facts(trace_id) WHERE trace_id IS NOT NULL;
CREATE INDEX facts_by_tool  ON facts(tool_id) WHERE tool_id IS NOT NULL;
CREATE INDEX facts_by_key   ON facts(idempotency_key) WHERE idempotency_key IS NOT NULL;

CREATE TRIGGER facts_no_update BEFORE UPDATE ON facts
BEGIN SELECT RAISE(ABORT, 'facts are immutable: UPDATE refused'); END;
CREATE TRIGGER facts_no_delete BEFORE DELETE ON facts
BEGIN SELECT RAISE(ABORT, 'facts are immutable: DELETE refused'); END;

CREATE TABLE idempotency_keys(
  key         TEXT PRIMARY KEY,
  status      TEXT NOT NULL CHECK (status IN ('pending', 'completed', 'failed')),
  fingerprint TEXT NOT NULL,
  response    TEXT,
  created_at  INTEGER NOT NULL,
  expires_at  INTEGER
) WITHOUT ROWID;
CREATE INDEX idempotency_keys_by_expiry ON idempotency_keys(expires_at) WHERE expires_at IS NOT NULL;
CREATE INDEX idempotency_keys_pending ON idempotency_keys(key) WHERE status = 'pending';

CREATE TABLE alarms(
  name       TEXT PRIMARY KEY,
  due_at     INTEGER NOT NULL,
  payload    TEXT NOT NULL,
  attempts   INTEGER NOT NULL DEFAULT 0,
  created_at INTEGER NOT NULL
) WITHOUT ROWID;
CREATE INDEX alarms_by_due ON alarms(due_at);
)sql";

} // namespace factum::schema
