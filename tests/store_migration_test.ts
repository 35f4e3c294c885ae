/**
 * The current schema (sessions keyed by user and id, pending steps, session leases): a new database, and a real
 * version-1 one migrated.
 */
import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { SCHEMA_VERSION, SqliteStore } from "../src/store/sqlite.ts";
import { traceRow } from "../src/trace/shared_trace.ts";
import { keyOf, tempDir } from "./_harness.ts";
import { SCHEMA_V1, SCHEMA_V1_OLD_INDEX } from "./fixtures/store_v1_schema.ts";

const T0 = "2026-01-01T00:00:00.000Z";
const CALLS = '[{"id":"c1","name":"calculator","arguments":"{\\"expression\\":\\"1+2\\"}"}]';

/** Rows of every kind a version-1 database holds; ids deliberately not in insertion order. */
const V1_ROWS = `
INSERT INTO sessions VALUES ('default', 'alice', '{"facts":["likes teal"]}', 3, 1, '${T0}', '2026-01-01T00:00:09.000Z');
INSERT INTO sessions VALUES ('work', 'alice', NULL, 0, 0, '${T0}', '2026-01-01T00:00:05.000Z');
INSERT INTO sessions VALUES ('b-1', 'bob', NULL, 1, 0, '${T0}', '2026-01-01T00:00:07.000Z');
INSERT INTO messages VALUES ('z', 'default', 'user', 'what is 1+2?', NULL, NULL, '2026-01-01T00:00:01.000Z');
INSERT INTO messages VALUES ('a', 'default', 'assistant', NULL, '${CALLS}', NULL, '2026-01-01T00:00:02.000Z');
INSERT INTO messages VALUES ('m', 'default', 'tool', '{"ok":true}', NULL, 'c1', '2026-01-01T00:00:03.000Z');
INSERT INTO messages VALUES ('q', 'default', 'assistant', 'three' || char(0) || 'NUL', NULL, NULL, '2026-01-01T00:00:04.000Z');
INSERT INTO messages VALUES ('z', 'b-1', 'user', 'bob here', NULL, NULL, '2026-01-01T00:00:06.000Z');
INSERT INTO todos (session_id, text, completed, created_at, completed_at) VALUES ('default', 'open one', 0, '${T0}', NULL);
INSERT INTO todos (session_id, text, completed, created_at, completed_at) VALUES ('b-1', 'bob''s', 0, '${T0}', NULL);
INSERT INTO todos (session_id, text, completed, created_at, completed_at)
  VALUES ('default', 'done one', 1, '${T0}', '2026-01-01T00:00:08.000Z');
INSERT INTO todos (session_id, text, completed, created_at, completed_at) VALUES ('default', 'deleted', 0, '${T0}', NULL);
DELETE FROM todos WHERE text = 'deleted';
PRAGMA user_version = 1;
`;

function userVersion(path: string): number {
  const db = new DatabaseSync(path);
  try {
    return (db.prepare("PRAGMA user_version").get() as { user_version: number }).user_version;
  } finally {
    db.close();
  }
}

/** The schema as SQLite stores it, every object's name and SQL, in a stable order. */
function schemaOf(path: string): string[] {
  const db = new DatabaseSync(path);
  try {
    return db.prepare("SELECT type, name, sql FROM sqlite_master ORDER BY type, name").all()
      .map((r) => `${r.type} ${r.name}: ${r.sql}`);
  } finally {
    db.close();
  }
}

function writeV1(path: string, schema: string): void {
  const db = new DatabaseSync(path);
  db.exec("PRAGMA foreign_keys = ON");
  db.exec(schema);
  db.exec(V1_ROWS);
  db.close();
}

Deno.test("SqliteStore creates the current schema on a new database, sessions keyed by (user_id, id)", () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  new SqliteStore(path).close();
  assert.equal(userVersion(path), SCHEMA_VERSION);
  const db = new DatabaseSync(path);
  try {
    const key = (table: string) =>
      (db.prepare(`PRAGMA table_info(${table})`).all() as { name: string; pk: number }[])
        .filter((c) => c.pk > 0).sort((a, b) => a.pk - b.pk).map((c) => c.name);
    assert.deepEqual(key("sessions"), ["user_id", "id"]);
    assert.deepEqual(key("messages"), ["user_id", "session_id", "id"]);
    const fks = (table: string) =>
      (db.prepare(`PRAGMA foreign_key_list(${table})`).all() as {
        from: string;
        to: string;
        on_delete: string;
      }[])
        .map((f) => `${f.from}->${f.to} ${f.on_delete}`);
    assert.deepEqual(fks("messages"), ["user_id->user_id CASCADE", "session_id->id CASCADE"]);
    assert.deepEqual(fks("todos"), ["user_id->user_id CASCADE", "session_id->id CASCADE"]);
  } finally {
    db.close();
  }
});

for (
  const [what, schema] of [["version-1", SCHEMA_V1], [
    "version-1 (with the old sessions_by_user index)",
    SCHEMA_V1_OLD_INDEX,
  ]]
) {
  Deno.test(`SqliteStore migrates a ${what} database to the current version keeping every row; reopening is a no-op`, async () => {
    using dir = tempDir();
    const path = `${dir.path}/s.db`;
    writeV1(path, schema);

    const store = new SqliteStore(path, { now: () => new Date("2026-02-01T00:00:00.000Z") });
    try {
      assert.deepEqual(await store.get(keyOf("default", "alice")), {
        id: "default",
        userId: "alice",
        summary: '{"facts":["likes teal"]}',
        turnCount: 3,
        compactedTurns: 1,
        calibration: null,
        title: null,
        createdAt: T0,
        updatedAt: "2026-01-01T00:00:09.000Z",
      });
      assert.deepEqual((await store.listSessions("alice")).map((s) => [s.id, s.turnCount, s.updatedAt]), [
        ["default", 3, "2026-01-01T00:00:09.000Z"],
        ["work", 0, "2026-01-01T00:00:05.000Z"],
      ]);
      assert.deepEqual((await store.listSessions("bob")).map((s) => s.id), ["b-1"]);
      assert.equal(await store.get(keyOf("default", "bob")), null, "a session stays with its user");
      assert.deepEqual(await store.messages(keyOf("default", "alice")), [
        { id: "z", role: "user", content: "what is 1+2?", createdAt: "2026-01-01T00:00:01.000Z" },
        {
          id: "a",
          role: "assistant",
          content: null,
          toolCalls: JSON.parse(CALLS),
          createdAt: "2026-01-01T00:00:02.000Z",
        },
        {
          id: "m",
          role: "tool",
          content: '{"ok":true}',
          toolCallId: "c1",
          createdAt: "2026-01-01T00:00:03.000Z",
        },
        { id: "q", role: "assistant", content: "three\u0000NUL", createdAt: "2026-01-01T00:00:04.000Z" },
      ], "insertion order, tool data and a NUL survive");
      assert.deepEqual((await store.messages(keyOf("b-1", "bob"))).map((m) => [m.id, m.content]), [[
        "z",
        "bob here",
      ]]);
      assert.deepEqual(await store.listTodos(keyOf("default", "alice")), [
        { id: 1, text: "open one", completed: false, createdAt: T0, completedAt: null },
        { id: 3, text: "done one", completed: true, createdAt: T0, completedAt: "2026-01-01T00:00:08.000Z" },
      ]);
      assert.deepEqual((await store.listTodos(keyOf("b-1", "bob"))).map((t) => [t.id, t.text]), [[
        2,
        "bob's",
      ]]);
      assert.equal(
        (await store.addTodo(keyOf("work", "alice"), "new")).id,
        5,
        "a deleted todo's id is never reused",
      );
      assert.equal(await store.deleteSession(keyOf("default", "alice")), true);
      assert.deepEqual(await store.listTodos(keyOf("default", "alice")), [], "the composite keys cascade");
    } finally {
      await store.close();
    }

    assert.equal(userVersion(path), SCHEMA_VERSION);
    const migrated = schemaOf(path);
    assert.ok(
      !migrated.some((line) => /_v1|sessions_by_user|sessions_of_user/.test(line)),
      migrated.join("\n"),
    );
    const db = new DatabaseSync(path);
    try {
      assert.deepEqual(db.prepare("PRAGMA foreign_key_check").all(), []);
      assert.equal(
        (db.prepare("PRAGMA integrity_check").get() as { integrity_check: string }).integrity_check,
        "ok",
      );
    } finally {
      db.close();
    }

    const again = new SqliteStore(path);
    try {
      assert.deepEqual((await again.listSessions("alice")).map((s) => s.id), ["work"]);
      assert.equal((await again.messages(keyOf("b-1", "bob"))).length, 1);
    } finally {
      await again.close();
    }
    assert.deepEqual(schemaOf(path), migrated, "reopening changes nothing");
    assert.equal(userVersion(path), SCHEMA_VERSION);
  });
}

Deno.test("SqliteStore refuses to migrate a version-1 database with a message of no session, changing nothing", () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  writeV1(path, SCHEMA_V1);
  // Foreign keys off, as an old tool might have written it: an orphan the copy would lose.
  const db = new DatabaseSync(path, { enableForeignKeyConstraints: false });
  db.exec(
    "INSERT INTO messages VALUES ('o', 'nobody', 'user', 'orphan', NULL, NULL, '2026-01-01T00:00:00.000Z')",
  );
  db.close();
  const before = schemaOf(path);
  assert.throws(
    () => new SqliteStore(path),
    new RegExp(`Cannot migrate the session database to version ${SCHEMA_VERSION}: 1 of 6 messages`),
  );
  assert.equal(userVersion(path), 1);
  assert.deepEqual(schemaOf(path), before, "the transaction rolled back");
});

/**
 * A database of `version`: one of today's with session "s" and what `fill` writes (a todo, "keep me"), then
 * `drop` taking the later versions' tables and columns away, and the version recorded.
 */
async function olderDatabase(
  path: string,
  version: number,
  drop: string,
  fill: (store: SqliteStore) => Promise<unknown> = (store) => store.addTodo(keyOf("s"), "keep me"),
): Promise<void> {
  const store = new SqliteStore(path, { now: () => new Date(T0) });
  await store.getOrCreate(keyOf("s"));
  await fill(store);
  await store.close();
  const db = new DatabaseSync(path);
  db.exec(`${drop} PRAGMA user_version = ${version};`);
  db.close();
}

Deno.test("SqliteStore migrates a version-4 database (no trace table) to the current version keeping every row", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  await olderDatabase(
    path,
    4,
    `${DROP_CACHE_WRITES} ${DROP_STATE} DROP TABLE trace_events; DROP INDEX todos_by_call; ALTER TABLE todos DROP COLUMN call_id; ` +
      "ALTER TABLE sessions DROP COLUMN calibration; DROP TABLE session_usage; DROP TABLE usage_daily; " +
      `${DROP_MEMORY} ${DROP_TITLE}`,
  );

  const migrated = new SqliteStore(path);
  try {
    assert.deepEqual((await migrated.listTodos(keyOf("s"))).map((t) => t.text), ["keep me"]);
    const event = { ts: "2026-01-01T00:00:00.000Z", user_id: "u", session_id: "s", run_id: "r" };
    await migrated.trace.write([traceRow(event)!]);
    const query = { userId: "u", sessionId: "s", since: T0, runId: null, limit: 10, cursor: null };
    assert.deepEqual((await migrated.trace.page(query)).events, [event]);
    // Version 7's tables.
    const usage = {
      day: "2026-01-01",
      model: "m",
      promptTokens: 3,
      cachedTokens: 0,
      cacheWriteTokens: 0,
      completionTokens: 1,
      calls: 1,
    };
    await migrated.recordUsage(keyOf("s"), [{ ...usage, estimatedCalls: 0 }]);
    assert.equal((await migrated.sessionUsage(keyOf("s")))[0].promptTokens, 3);
    assert.equal((await migrated.userUsage("u"))[0].promptTokens, 3);
    // Version 9's tables.
    await migrated.remember("u", { items: ["green tea"], limit: 5 });
    assert.equal((await migrated.recallMemory("u", "tea", 5)).length, 1);
  } finally {
    await migrated.close();
  }
  assert.equal(userVersion(path), SCHEMA_VERSION);
});

/** Version 9's tables and triggers, dropped to make a version-8 database. */
const DROP_MEMORY =
  "DROP TRIGGER user_memory_unindexed; DROP TABLE user_memory_words; DROP TABLE user_memory;";
/** Version 10's column, dropped to make a version-9 database. */
const DROP_TITLE = "ALTER TABLE sessions DROP COLUMN title;";
/** Version 11's columns, dropped to make a version-10 database. */
const DROP_STATE = "ALTER TABLE messages DROP COLUMN provider_state; " +
  "ALTER TABLE pending_steps DROP COLUMN provider_state; " +
  "ALTER TABLE usage_daily DROP COLUMN cached_tokens; ALTER TABLE session_usage DROP COLUMN cached_tokens;";
/** Version 12's columns and version 13's table, dropped to make a version-11 database. */
const DROP_CACHE_WRITES = "ALTER TABLE usage_daily DROP COLUMN cache_write_tokens; " +
  "ALTER TABLE session_usage DROP COLUMN cache_write_tokens; DROP TABLE idempotency_keys; DROP TABLE responses;";
/** Version 13's and 14's tables, dropped to make a version-12 database. */
const DROP_IDEMPOTENCY = "DROP TABLE idempotency_keys; DROP TABLE responses;";
/** Version 14's table, dropped to make a version-13 database. */
const DROP_RESPONSES = "DROP TABLE responses;";

Deno.test("SqliteStore migrates a version-8 database to the user's memory, keeping every row", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  await olderDatabase(path, 8, `${DROP_MEMORY} ${DROP_TITLE} ${DROP_STATE} ${DROP_CACHE_WRITES}`);

  const migrated = new SqliteStore(path);
  try {
    assert.deepEqual((await migrated.listTodos(keyOf("s"))).map((t) => t.text), ["keep me"]);
    const written = await migrated.remember("u", { items: ["Prefers green tea", "Has a dog"], limit: 5 });
    assert.equal(written.added, 2);
    assert.deepEqual((await migrated.recallMemory("u", "which tea?", 5)).map((r) => r.text), [
      "Prefers green tea",
    ]);
    assert.equal(await migrated.forgetMemory("u"), 2);
    assert.deepEqual(await migrated.recallMemory("u", "tea", 5), [], "the index follows the table");
  } finally {
    await migrated.close();
  }
  assert.equal(userVersion(path), SCHEMA_VERSION);
});

Deno.test("SqliteStore migrates a version-9 database to session titles: a session asked before is named from its first question", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  await olderDatabase(path, 9, `${DROP_TITLE} ${DROP_STATE} ${DROP_CACHE_WRITES}`, async (store) => {
    await store.append(keyOf("s"), [{ id: "q1", role: "user", content: "Old question?", createdAt: T0 }]);
  });

  const migrated = new SqliteStore(path, { now: () => new Date(T0) });
  try {
    assert.equal(
      (await migrated.get(keyOf("s")))?.title,
      null,
      "no title until the session is written again",
    );
    assert.deepEqual((await migrated.messages(keyOf("s"))).map((m) => m.content), ["Old question?"]);
    await migrated.append(keyOf("s"), [{ id: "q2", role: "user", content: "New question", createdAt: T0 }]);
    assert.equal(
      (await migrated.get(keyOf("s")))?.title,
      "Old question?",
      "the first stored question names it",
    );
  } finally {
    await migrated.close();
  }
  assert.equal(userVersion(path), SCHEMA_VERSION);
});

Deno.test("SqliteStore migrates a version-10 database to provider state and cached tokens: old messages read without state, new ones keep theirs", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  await olderDatabase(path, 10, `${DROP_STATE} ${DROP_CACHE_WRITES}`, async (store) => {
    await store.append(keyOf("s"), [{ id: "q1", role: "user", content: "Old question?", createdAt: T0 }]);
  });

  const migrated = new SqliteStore(path, { now: () => new Date(T0) });
  try {
    const [old] = await migrated.messages(keyOf("s"));
    assert.equal(old.content, "Old question?");
    assert.equal(old.providerState, undefined);
    const providerState = {
      origin: "https://api.deepseek.com deepseek-v4-pro",
      message: { reasoning_content: "r" },
    };
    await migrated.append(keyOf("s"), [{
      id: "a1",
      role: "assistant",
      content: "ok",
      createdAt: T0,
      providerState,
    }]);
    assert.deepEqual((await migrated.messages(keyOf("s")))[1].providerState, providerState);
  } finally {
    await migrated.close();
  }
  assert.equal(userVersion(path), SCHEMA_VERSION);
});

Deno.test("SqliteStore migrates a version-11 database to cache-written tokens: old counts read 0 of them, new ones add theirs", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const counts = {
    day: "2026-01-01",
    model: "m",
    promptTokens: 10,
    cachedTokens: 4,
    cacheWriteTokens: 0,
    completionTokens: 1,
    calls: 1,
    estimatedCalls: 0,
  };
  await olderDatabase(path, 11, DROP_CACHE_WRITES, async (store) => {
    await store.recordUsage(keyOf("s"), [counts]);
  });
  assert.equal(userVersion(path), 11);

  const migrated = new SqliteStore(path, { now: () => new Date(T0) });
  try {
    assert.deepEqual(
      await migrated.sessionUsage(keyOf("s")),
      [counts],
      "an old count wrote nothing to the cache",
    );
    await migrated.recordUsage(keyOf("s"), [{ ...counts, cachedTokens: 2, cacheWriteTokens: 6 }]);
    const [day] = await migrated.userUsage("u");
    assert.deepEqual([day.promptTokens, day.cachedTokens, day.cacheWriteTokens], [20, 6, 6]);
    assert.equal((await migrated.sessionUsage(keyOf("s")))[0].cacheWriteTokens, 6);
  } finally {
    await migrated.close();
  }
  assert.equal(userVersion(path), SCHEMA_VERSION);
});

Deno.test("SqliteStore migrates a version-12 database to idempotency keys, keeping its rows", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  await olderDatabase(path, 12, DROP_IDEMPOTENCY);
  assert.equal(userVersion(path), 12);

  const migrated = new SqliteStore(path, { now: () => new Date(T0) });
  try {
    assert.deepEqual((await migrated.listTodos(keyOf("s"))).map((t) => t.text), ["keep me"]);
    const key = { userId: "u", key: "k1" };
    const claim = await migrated.claimRequest(key, "h");
    assert.ok(claim.state === "new", claim.state);
    const response = { status: 200, contentType: "application/json", body: "{}" };
    assert.equal(await migrated.finishRequest(claim.held, response), true);
    assert.deepEqual(await migrated.claimRequest(key, "h"), { state: "done", response });
  } finally {
    await migrated.close();
  }
  assert.equal(userVersion(path), SCHEMA_VERSION);
});

Deno.test("SqliteStore migrates a version-13 database to kept responses, which go with their session", async () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  await olderDatabase(path, 13, DROP_RESPONSES);
  assert.equal(userVersion(path), 13);

  const migrated = new SqliteStore(path, { now: () => new Date(T0) });
  try {
    assert.deepEqual((await migrated.listTodos(keyOf("s"))).map((t) => t.text), ["keep me"]);
    assert.equal(await migrated.saveResponse(keyOf("s"), "resp_1", '{"id":"resp_1"}'), true);
    const kept = await migrated.response("u", "resp_1");
    assert.deepEqual(kept, {
      id: "resp_1",
      userId: "u",
      sessionId: "s",
      body: '{"id":"resp_1"}',
      createdAt: new Date(T0).toISOString(),
    });
    assert.equal(await migrated.response("someone-else", "resp_1"), null);
    assert.equal(await migrated.deleteSession(keyOf("s")), true);
    assert.equal(await migrated.response("u", "resp_1"), null);
  } finally {
    await migrated.close();
  }
  assert.equal(userVersion(path), SCHEMA_VERSION);
  assert.equal(SCHEMA_VERSION, 14);
});
