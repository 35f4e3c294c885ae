/**
 * The SQLite schema and its migrations: created whole on a new file, migrated step by step from version 1
 * (sessions keyed by id alone), 2, 3 or 4 (see {@linkcode SCHEMA_VERSION}), refused when newer than this code.
 * Private to `sqlite.ts`.
 * @module
 */
import type { DatabaseSync } from "node:sqlite";
import { migrationPath, type MigrationStep, SCHEMA_VERSION } from "./store.ts";

// Version 3: at most one step per session waits for approval; it goes with its session.
const PENDING_TABLE = `
CREATE TABLE pending_steps (
  user_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  run_id TEXT NOT NULL,
  turn INTEGER NOT NULL,
  step INTEGER NOT NULL,
  seq INTEGER NOT NULL,
  content TEXT,
  tool_calls TEXT NOT NULL,
  asked TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (user_id, session_id),
  FOREIGN KEY (user_id, session_id) REFERENCES sessions(user_id, id) ON DELETE CASCADE
);
`;

// Version 4: which process runs a session's turns, until when. No foreign key: a lease is taken before the
// first turn creates its session, and a deleted session's lease goes when its holder releases it.
// `expires_at` is milliseconds since the epoch.
const LEASE_TABLE = `
CREATE TABLE session_leases (
  user_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  owner TEXT NOT NULL,
  expires_at INTEGER NOT NULL,
  wanted INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (user_id, session_id)
);
`;

// Version 5: every process's trace events, which the trace route pages through (`line` is the event's JSON, as
// the tracer wrote it).
const TRACE_TABLE = `
CREATE TABLE trace_events (
  id INTEGER PRIMARY KEY,
  user_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  run_id TEXT NOT NULL,
  ts TEXT NOT NULL,
  line TEXT NOT NULL
);
CREATE INDEX trace_events_by_session ON trace_events(user_id, session_id, id);
`;

// Version 2: the sessions key starts with user_id, so it serves "the user's sessions" too: no other index
// (none on updated_at, which every save rewrites).
const SESSION_TABLES = `
CREATE TABLE sessions (
  user_id TEXT NOT NULL,
  id TEXT NOT NULL,
  summary TEXT,
  turn_count INTEGER NOT NULL DEFAULT 0,
  compacted_turns INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  updated_at TEXT NOT NULL,
  PRIMARY KEY (user_id, id)
);
CREATE TABLE messages (
  user_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  id TEXT NOT NULL,
  role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'runtime')),
  content TEXT,
  tool_calls TEXT,
  tool_call_id TEXT,
  created_at TEXT NOT NULL,
  -- Ids are unique per session: another session's message can never make a save a silent no-op.
  PRIMARY KEY (user_id, session_id, id),
  FOREIGN KEY (user_id, session_id) REFERENCES sessions(user_id, id) ON DELETE CASCADE
);
CREATE TABLE todos (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  user_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  text TEXT NOT NULL,
  completed INTEGER NOT NULL DEFAULT 0,
  created_at TEXT NOT NULL,
  completed_at TEXT,
  FOREIGN KEY (user_id, session_id) REFERENCES sessions(user_id, id) ON DELETE CASCADE
);
CREATE INDEX todos_by_session ON todos(user_id, session_id);
`;

// Version 1 to 2, keeping every row: the old tables go aside (indexes dropped first, or the new ones would
// collide); a message keeps its rowid (its read order), a todo its id, the todo counter its value.
const FROM_VERSION_1 = `
DROP INDEX IF EXISTS sessions_by_user;
DROP INDEX IF EXISTS sessions_of_user;
DROP INDEX IF EXISTS todos_by_session;
ALTER TABLE sessions RENAME TO sessions_v1;
ALTER TABLE messages RENAME TO messages_v1;
ALTER TABLE todos RENAME TO todos_v1;
${SESSION_TABLES}
INSERT INTO sessions (user_id, id, summary, turn_count, compacted_turns, created_at, updated_at)
  SELECT user_id, id, summary, turn_count, compacted_turns, created_at, updated_at FROM sessions_v1;
INSERT INTO messages (rowid, user_id, session_id, id, role, content, tool_calls, tool_call_id, created_at)
  SELECT m.rowid, s.user_id, m.session_id, m.id, m.role, m.content, m.tool_calls, m.tool_call_id, m.created_at
  FROM messages_v1 AS m JOIN sessions_v1 AS s ON s.id = m.session_id ORDER BY m.rowid;
INSERT INTO todos (id, user_id, session_id, text, completed, created_at, completed_at)
  SELECT t.id, s.user_id, t.session_id, t.text, t.completed, t.created_at, t.completed_at
  FROM todos_v1 AS t JOIN sessions_v1 AS s ON s.id = t.session_id ORDER BY t.id;
DELETE FROM sqlite_sequence WHERE name = 'todos';
INSERT INTO sqlite_sequence (name, seq) SELECT 'todos', seq FROM sqlite_sequence WHERE name = 'todos_v1';
`;

// Children first: dropping a parent with foreign keys on deletes its rows, cascading.
/** Version 6: the tool call that added a todo, so a call run again after a crash adds nothing. */
const TODO_CALLS = `
ALTER TABLE todos ADD COLUMN call_id TEXT;
CREATE UNIQUE INDEX todos_by_call ON todos(user_id, session_id, call_id) WHERE call_id IS NOT NULL;
`;

/** Version 7: the provider's count of the session's last request (JSON of a `Calibration`). */
const CALIBRATION = `
ALTER TABLE sessions ADD COLUMN calibration TEXT;
`;

/**
 * Version 8: tokens of model calls per user, UTC day (`YYYY-MM-DD`) and model, which the daily quota reads and
 * no delete touches; and per session and model, which go with the session.
 */
const USAGE_TABLES = `
CREATE TABLE usage_daily (
  user_id TEXT NOT NULL,
  day TEXT NOT NULL,
  model TEXT NOT NULL,
  prompt_tokens INTEGER NOT NULL DEFAULT 0,
  completion_tokens INTEGER NOT NULL DEFAULT 0,
  calls INTEGER NOT NULL DEFAULT 0,
  estimated_calls INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (user_id, day, model)
);
CREATE TABLE session_usage (
  user_id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  model TEXT NOT NULL,
  last_day TEXT NOT NULL,
  prompt_tokens INTEGER NOT NULL DEFAULT 0,
  completion_tokens INTEGER NOT NULL DEFAULT 0,
  calls INTEGER NOT NULL DEFAULT 0,
  estimated_calls INTEGER NOT NULL DEFAULT 0,
  PRIMARY KEY (user_id, session_id, model),
  FOREIGN KEY (user_id, session_id) REFERENCES sessions(user_id, id) ON DELETE CASCADE
);
`;

/**
 * Version 9: the user's memory across sessions, one row per item (`norm` its case- and space-folded text,
 * unique per user), and its full-text index. The store indexes each item's words as tokens of their owner
 * (`memoryTokens`: `u`, the user id's UTF-8 bytes in hex, `z`, the word), so a recall matches the user's items
 * only and bm25 weighs a word by how many of the user's own items hold it: the work of a recall grows with the
 * user's items, not with everyone's. The index keeps no copy of the tokens (contentless, its rows deletable):
 * the text is the table's. A trigger takes an erased item out of the index.
 */
const MEMORY_TABLES = `
CREATE TABLE user_memory (
  id INTEGER PRIMARY KEY AUTOINCREMENT,
  user_id TEXT NOT NULL,
  text TEXT NOT NULL,
  norm TEXT NOT NULL,
  source_session TEXT,
  first_seen TEXT NOT NULL,
  last_seen TEXT NOT NULL,
  last_used TEXT NOT NULL,
  use_count INTEGER NOT NULL DEFAULT 0,
  UNIQUE (user_id, norm)
);
CREATE INDEX user_memory_by_use ON user_memory(user_id, last_used, id);
CREATE VIRTUAL TABLE user_memory_words USING fts5(words, content = '', contentless_delete = 1,
  tokenize = 'unicode61 remove_diacritics 2');
CREATE TRIGGER user_memory_unindexed AFTER DELETE ON user_memory BEGIN
  DELETE FROM user_memory_words WHERE rowid = old.id;
END;
`;

/** Version 10: the session's title, given by its user or named from its first question; null before one. */
const SESSION_TITLE = `
ALTER TABLE sessions ADD COLUMN title TEXT;
`;

/**
 * Version 11: what a provider needs back of an assistant message (JSON of a `ProviderState`, never shown), on
 * a stored message and on a paused step; and the input tokens a provider read from its cache.
 */
const PROVIDER_STATE = `
ALTER TABLE messages ADD COLUMN provider_state TEXT;
ALTER TABLE pending_steps ADD COLUMN provider_state TEXT;
ALTER TABLE usage_daily ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE session_usage ADD COLUMN cached_tokens INTEGER NOT NULL DEFAULT 0;
`;

/** Version 12: the input tokens a provider wrote to its cache (priced apart from the rest of the input). */
const CACHE_WRITES = `
ALTER TABLE usage_daily ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
ALTER TABLE session_usage ADD COLUMN cache_write_tokens INTEGER NOT NULL DEFAULT 0;
`;

/**
 * Version 13: the requests a client marked with an `Idempotency-Key`, per user: a hash of what the request
 * asked, whether it still runs or is done, and when done its response (status, content type, body). Times are
 * milliseconds since the epoch; the index serves the retention pass, which deletes claims older than a day.
 */
const IDEMPOTENCY_TABLE = `
CREATE TABLE idempotency_keys (
  user_id TEXT NOT NULL,
  key TEXT NOT NULL,
  request_hash TEXT NOT NULL,
  state TEXT NOT NULL CHECK (state IN ('running', 'done')),
  status INTEGER,
  content_type TEXT,
  body TEXT,
  created_at INTEGER NOT NULL,
  PRIMARY KEY (user_id, key)
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys(created_at);
`;

/**
 * Version 14: the responses of `POST /v1/responses` (the response object's JSON), each with the session its
 * turn ran on and going with it. Ids are unique per user; `created_at` is ISO time.
 */
const RESPONSES_TABLE = `
CREATE TABLE responses (
  user_id TEXT NOT NULL,
  id TEXT NOT NULL,
  session_id TEXT NOT NULL,
  body TEXT NOT NULL,
  created_at TEXT NOT NULL,
  PRIMARY KEY (user_id, id),
  FOREIGN KEY (user_id, session_id) REFERENCES sessions(user_id, id) ON DELETE CASCADE
);
CREATE INDEX responses_by_session ON responses(user_id, session_id);
`;

const DROP_VERSION_1 = `
DROP TABLE messages_v1;
DROP TABLE todos_v1;
DROP TABLE sessions_v1;
`;

function count(db: DatabaseSync, table: string): number {
  return (db.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n;
}

/** Version 1 to 2: the rows copied into the tables keyed by user, refused if one would be lost. */
function fromVersion1(db: DatabaseSync): void {
  db.exec(FROM_VERSION_1);
  for (const table of ["messages", "todos"]) {
    const before = count(db, `${table}_v1`);
    const after = count(db, table);
    if (before !== after) {
      throw new Error(
        `Cannot migrate the session database to version ${SCHEMA_VERSION}: ` +
          `${before - after} of ${before} ${table} belong to no session`,
      );
    }
  }
  db.exec(DROP_VERSION_1);
}

const exec = (sql: string) => (db: DatabaseSync) => db.exec(sql);

/** SQLite's migrations: a new file gets the whole schema; later versions only add tables. */
const STEPS: readonly MigrationStep<(db: DatabaseSync) => void>[] = [
  {
    from: 0,
    to: SCHEMA_VERSION,
    run: exec(
      SESSION_TABLES + PENDING_TABLE + LEASE_TABLE + TRACE_TABLE + TODO_CALLS + CALIBRATION + USAGE_TABLES +
        MEMORY_TABLES + SESSION_TITLE + PROVIDER_STATE + CACHE_WRITES + IDEMPOTENCY_TABLE +
        RESPONSES_TABLE,
    ),
  },
  { from: 1, to: 2, run: fromVersion1 },
  { from: 2, to: 3, run: exec(PENDING_TABLE) },
  { from: 3, to: 4, run: exec(LEASE_TABLE) },
  { from: 4, to: 5, run: exec(TRACE_TABLE) },
  { from: 5, to: 6, run: exec(TODO_CALLS) },
  { from: 6, to: 7, run: exec(CALIBRATION) },
  { from: 7, to: 8, run: exec(USAGE_TABLES) },
  { from: 8, to: 9, run: exec(MEMORY_TABLES) },
  { from: 9, to: 10, run: exec(SESSION_TITLE) },
  { from: 10, to: 11, run: exec(PROVIDER_STATE) },
  { from: 11, to: 12, run: exec(CACHE_WRITES) },
  { from: 12, to: 13, run: exec(IDEMPOTENCY_TABLE) },
  { from: 13, to: 14, run: exec(RESPONSES_TABLE) },
];

/**
 * Brings the database to {@linkcode SCHEMA_VERSION} inside `transaction`, or fails changing nothing: a newer
 * version is refused, and so is a version-1 database with a message or todo of no session (the copy would
 * lose it).
 */
export function migrate(db: DatabaseSync, transaction: (work: () => void) => void): void {
  const version = () => (db.prepare("PRAGMA user_version").get() as { user_version: number }).user_version;
  if (migrationPath(version(), STEPS).length === 0) return;
  transaction(() => {
    // Read again under the write lock: another process may have migrated since.
    for (const step of migrationPath(version(), STEPS)) step(db);
    db.exec(`PRAGMA user_version = ${SCHEMA_VERSION}`);
  });
}
