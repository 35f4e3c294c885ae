/**
 * The PostgreSQL schema and its migrations, at the version SQLite's has ({@linkcode SCHEMA_VERSION}), recorded
 * in `agent_schema`. Every replica runs {@linkcode migrate} at start-up; an advisory lock makes the others wait
 * while one migrates. Private to `postgres.ts`.
 *
 * Tables mean what SQLite's do. Free text that may hold NUL (message ids, content, call ids, message times, todo texts), which PostgreSQL's `text` refuses, is
 * stored as its UTF-8 bytes (`bytea`), as SQLite's store reads it back; ids and timestamps the store writes
 * itself are `text` in the C collation, so they sort as SQLite sorts them.
 * @module
 */
import type { Sql } from "./_postgres_client.ts";
import { migrationPath, type MigrationStep, SCHEMA_VERSION } from "./store.ts";

/** Version 3, the first PostgreSQL had: sessions, their messages, todos and the step that waits for approval. */
const SESSION_TABLES = `
CREATE TABLE sessions (
  user_id text COLLATE "C" NOT NULL,
  id text COLLATE "C" NOT NULL,
  summary text,
  turn_count integer NOT NULL DEFAULT 0,
  compacted_turns integer NOT NULL DEFAULT 0,
  created_at text COLLATE "C" NOT NULL,
  updated_at text COLLATE "C" NOT NULL,
  PRIMARY KEY (user_id, id)
);
CREATE TABLE messages (
  -- The read order, as SQLite's rowid.
  seq bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  user_id text COLLATE "C" NOT NULL,
  session_id text COLLATE "C" NOT NULL,
  id bytea NOT NULL,
  role text NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'runtime')),
  content bytea,
  tool_calls text,
  tool_call_id bytea,
  created_at bytea NOT NULL,
  UNIQUE (user_id, session_id, id),
  FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, id) ON DELETE CASCADE
);
CREATE INDEX messages_by_session ON messages (user_id, session_id, seq);
CREATE TABLE todos (
  id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  user_id text COLLATE "C" NOT NULL,
  session_id text COLLATE "C" NOT NULL,
  text bytea NOT NULL,
  completed integer NOT NULL DEFAULT 0 CHECK (completed IN (0, 1)),
  created_at text NOT NULL,
  completed_at text,
  FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, id) ON DELETE CASCADE
);
CREATE INDEX todos_by_session ON todos (user_id, session_id);
CREATE TABLE pending_steps (
  user_id text COLLATE "C" NOT NULL,
  session_id text COLLATE "C" NOT NULL,
  run_id text NOT NULL,
  turn integer NOT NULL,
  step integer NOT NULL,
  seq integer NOT NULL,
  content bytea,
  tool_calls text NOT NULL,
  asked text NOT NULL,
  created_at text NOT NULL,
  PRIMARY KEY (user_id, session_id),
  FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, id) ON DELETE CASCADE
);
`;

/** Version 4: which process runs a session's turns. No foreign key: a lease is taken before the session exists. */
const LEASE_TABLE = `
CREATE TABLE session_leases (
  user_id text COLLATE "C" NOT NULL,
  session_id text COLLATE "C" NOT NULL,
  owner text NOT NULL,
  expires_at timestamptz NOT NULL,
  wanted boolean NOT NULL DEFAULT false,
  PRIMARY KEY (user_id, session_id)
);
`;

/** Version 5: trace events, so the trace route of any replica finds every replica's events. */
const TRACE_TABLE = `
CREATE TABLE trace_events (
  id bigint GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  user_id text COLLATE "C" NOT NULL,
  session_id text COLLATE "C" NOT NULL,
  run_id text NOT NULL,
  ts timestamptz NOT NULL,
  line text NOT NULL
);
CREATE INDEX trace_events_by_session ON trace_events (user_id, session_id, id);
`;

/** Version 6: the tool call that added a todo, so a call run again after a crash adds nothing. */
const TODO_CALLS = `
ALTER TABLE todos ADD COLUMN call_id bytea;
CREATE UNIQUE INDEX todos_by_call ON todos (user_id, session_id, call_id) WHERE call_id IS NOT NULL;
`;

/** Version 7: the provider's count of the session's last request (JSON of a `Calibration`). */
const CALIBRATION = `
ALTER TABLE sessions ADD COLUMN calibration text;
`;

/**
 * Version 8: tokens of model calls per user, UTC day and model (the daily quota reads them; no delete touches
 * them), and per session and model (gone with the session).
 */
const USAGE_TABLES = `
CREATE TABLE usage_daily (
  user_id text COLLATE "C" NOT NULL,
  day text COLLATE "C" NOT NULL,
  model text COLLATE "C" NOT NULL,
  prompt_tokens bigint NOT NULL DEFAULT 0,
  completion_tokens bigint NOT NULL DEFAULT 0,
  calls bigint NOT NULL DEFAULT 0,
  estimated_calls bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (user_id, day, model)
);
CREATE TABLE session_usage (
  user_id text COLLATE "C" NOT NULL,
  session_id text COLLATE "C" NOT NULL,
  model text COLLATE "C" NOT NULL,
  last_day text COLLATE "C" NOT NULL,
  prompt_tokens bigint NOT NULL DEFAULT 0,
  completion_tokens bigint NOT NULL DEFAULT 0,
  calls bigint NOT NULL DEFAULT 0,
  estimated_calls bigint NOT NULL DEFAULT 0,
  PRIMARY KEY (user_id, session_id, model),
  FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, id) ON DELETE CASCADE
);
`;

/**
 * Version 9: the user's memory across sessions, one row per item (`norm` its case- and space-folded text,
 * unique per user), with its words as a `tsvector` (the `simple` configuration: no stemming, as SQLite's
 * index) for recall by `ts_rank`.
 */
const MEMORY_TABLES = `
CREATE TABLE user_memory (
  id integer GENERATED ALWAYS AS IDENTITY PRIMARY KEY,
  user_id text COLLATE "C" NOT NULL,
  text text NOT NULL,
  norm text NOT NULL,
  source_session text COLLATE "C",
  first_seen text COLLATE "C" NOT NULL,
  last_seen text COLLATE "C" NOT NULL,
  last_used text COLLATE "C" NOT NULL,
  use_count integer NOT NULL DEFAULT 0,
  words tsvector GENERATED ALWAYS AS (to_tsvector('simple', text)) STORED,
  UNIQUE (user_id, norm)
);
CREATE INDEX user_memory_by_use ON user_memory (user_id, last_used, id);
CREATE INDEX user_memory_words ON user_memory USING gin (words);
`;

/** Version 10: the session's title, given by its user or named from its first question; null before one. */
const SESSION_TITLE = `
ALTER TABLE sessions ADD COLUMN title text;
`;

/**
 * Version 11: what a provider needs back of an assistant message (JSON of a `ProviderState`, never shown), on
 * a stored message and on a paused step; and the input tokens a provider read from its cache.
 */
const PROVIDER_STATE = `
ALTER TABLE messages ADD COLUMN provider_state text;
ALTER TABLE pending_steps ADD COLUMN provider_state text;
ALTER TABLE usage_daily ADD COLUMN cached_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE session_usage ADD COLUMN cached_tokens bigint NOT NULL DEFAULT 0;
`;

/** Version 12: the input tokens a provider wrote to its cache (priced apart from the rest of the input). */
const CACHE_WRITES = `
ALTER TABLE usage_daily ADD COLUMN cache_write_tokens bigint NOT NULL DEFAULT 0;
ALTER TABLE session_usage ADD COLUMN cache_write_tokens bigint NOT NULL DEFAULT 0;
`;

/**
 * Version 13: the requests a client marked with an `Idempotency-Key`, per user: a hash of what the request
 * asked, whether it still runs or is done, and when done its response. Times are milliseconds since the epoch
 * on the store's clock; the index serves the retention pass.
 */
const IDEMPOTENCY_TABLE = `
CREATE TABLE idempotency_keys (
  user_id text COLLATE "C" NOT NULL,
  key text COLLATE "C" NOT NULL,
  request_hash text NOT NULL,
  state text NOT NULL CHECK (state IN ('running', 'done')),
  status integer,
  content_type text,
  body text,
  created_at bigint NOT NULL,
  PRIMARY KEY (user_id, key)
);
CREATE INDEX idempotency_keys_by_age ON idempotency_keys (created_at);
`;

/**
 * Version 14: the responses of `POST /v1/responses` (the response object's JSON), each with the session its
 * turn ran on and going with it. Ids are unique per user; `created_at` is ISO time.
 */
const RESPONSES_TABLE = `
CREATE TABLE responses (
  user_id text COLLATE "C" NOT NULL,
  id text COLLATE "C" NOT NULL,
  session_id text COLLATE "C" NOT NULL,
  body text NOT NULL,
  created_at text NOT NULL,
  PRIMARY KEY (user_id, id),
  FOREIGN KEY (user_id, session_id) REFERENCES sessions (user_id, id) ON DELETE CASCADE
);
CREATE INDEX responses_by_session ON responses (user_id, session_id);
`;

const STEPS: readonly MigrationStep<string>[] = [
  { from: 0, to: 3, run: SESSION_TABLES },
  { from: 3, to: 4, run: LEASE_TABLE },
  { from: 4, to: 5, run: TRACE_TABLE },
  { from: 5, to: 6, run: TODO_CALLS },
  { from: 6, to: 7, run: CALIBRATION },
  { from: 7, to: 8, run: USAGE_TABLES },
  { from: 8, to: 9, run: MEMORY_TABLES },
  { from: 9, to: 10, run: SESSION_TITLE },
  { from: 10, to: 11, run: PROVIDER_STATE },
  { from: 11, to: 12, run: CACHE_WRITES },
  { from: 12, to: 13, run: IDEMPOTENCY_TABLE },
  { from: 13, to: 14, run: RESPONSES_TABLE },
];

/**
 * The version as `agent_schema` holds it: PostgreSQL counted its own steps before the versions were shared,
 * so a 1, 2 or 3 there is the shared 3, 4 or 5 (a 4 was never written), and from 5 on they are the same.
 */
const fromRecord = (recorded: number) => recorded > 0 && recorded <= 3 ? recorded + 2 : recorded;
const toRecord = (version: number) => version >= 3 && version <= 4 ? version - 2 : version;

/**
 * Brings the database (its current schema, per `search_path`) to `target` (a test's earlier version, or
 * {@linkcode SCHEMA_VERSION}) in one transaction, or fails changing nothing; a version newer than this code
 * knows is refused. Resolves to the version found.
 */
export async function migrate(sql: Sql, target = SCHEMA_VERSION): Promise<number> {
  return await sql.begin(async (tx) => {
    // One migrator per schema at a time; the others wait here, then find the work done.
    await tx`SELECT pg_advisory_xact_lock(hashtext('mini-agent schema ' || current_schema()))`;
    await tx`CREATE TABLE IF NOT EXISTS agent_schema (version integer NOT NULL)`;
    const rows = await tx`SELECT version FROM agent_schema`;
    const found = rows.length === 0 ? 0 : fromRecord(rows[0].version as number);
    for (const step of migrationPath(found, STEPS, target)) await tx.unsafe(step);
    const version = toRecord(Math.max(found, target));
    if (rows.length === 0) await tx`INSERT INTO agent_schema (version) VALUES (${version})`;
    else if (target > found) await tx`UPDATE agent_schema SET version = ${version}`;
    return found;
  }) as number;
}
