/**
 * The SQLite schema and its migrations: created on a new file, migrated from version 1 (sessions keyed by id
 * alone), 2 (no pending steps) or 3 (no session leases), refused when newer than this code. Private to
 * `sqlite.ts`.
 * @module
 */
import type { DatabaseSync } from "node:sqlite";

/** The schema version this code writes, kept in `PRAGMA user_version`. */
export const SCHEMA_VERSION = 4;

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

// The sessions key starts with user_id, so it serves "the user's sessions" too: no other index (none on
// updated_at, which every save rewrites).
const SCHEMA = `
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
${PENDING_TABLE}${LEASE_TABLE}`;

// Version 1 to 2, keeping every row: the old tables go aside (indexes dropped first, or the new ones would
// collide); a message keeps its rowid (its read order), a todo its id, the todo counter its value.
const FROM_VERSION_1 = `
DROP INDEX IF EXISTS sessions_by_user;
DROP INDEX IF EXISTS sessions_of_user;
DROP INDEX IF EXISTS todos_by_session;
ALTER TABLE sessions RENAME TO sessions_v1;
ALTER TABLE messages RENAME TO messages_v1;
ALTER TABLE todos RENAME TO todos_v1;
${SCHEMA}
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
const DROP_VERSION_1 = `
DROP TABLE messages_v1;
DROP TABLE todos_v1;
DROP TABLE sessions_v1;
`;

function count(db: DatabaseSync, table: string): number {
  return (db.prepare(`SELECT COUNT(*) AS n FROM ${table}`).get() as { n: number }).n;
}

/**
 * Brings the database to {@linkcode SCHEMA_VERSION} inside `transaction`, or fails changing nothing: a newer
 * version is refused, and so is a version-1 database with a message or todo of no session (the copy would lose it).
 */
export function migrate(db: DatabaseSync, transaction: (work: () => void) => void): void {
  const version = () => (db.prepare("PRAGMA user_version").get() as { user_version: number }).user_version;
  const seen = version();
  if (seen > SCHEMA_VERSION) {
    throw new Error(
      `Cannot open the session database: its schema version is ${seen}, this program knows ${SCHEMA_VERSION}`,
    );
  }
  if (seen === SCHEMA_VERSION) return;
  transaction(() => {
    // Read again under the write lock: another process may have migrated since.
    const current = version();
    if (current === SCHEMA_VERSION) return;
    if (current === 0) {
      db.exec(SCHEMA);
    } else if (current === 1) {
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
    } else if (current === 2 || current === 3) {
      // New tables only: every row stays where it is.
      if (current === 2) db.exec(PENDING_TABLE);
      db.exec(LEASE_TABLE);
    } else {
      throw new Error(`Cannot open the session database: unknown schema version ${current}`);
    }
    db.exec(`PRAGMA user_version = ${SCHEMA_VERSION}`);
  });
}
