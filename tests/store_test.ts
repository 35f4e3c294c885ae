import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { SessionError } from "../src/errors.ts";
import { SCHEMA_VERSION, SessionStore, validateId } from "../src/store.ts";
import type { StoredMessage } from "../src/types.ts";
import { steppingClock, storedMessage, tempDir } from "./_harness.ts";

const msg = storedMessage;

Deno.test("SessionStore creates the schema with WAL and records its version", () => {
  using dir = tempDir();
  const store = new SessionStore(`${dir.path}/s.db`);
  store.close();
  const db = new DatabaseSync(`${dir.path}/s.db`);
  assert.equal((db.prepare("PRAGMA journal_mode").get() as { journal_mode: string }).journal_mode, "wal");
  assert.equal(
    (db.prepare("PRAGMA user_version").get() as { user_version: number }).user_version,
    SCHEMA_VERSION,
  );
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all()
    .map((r) => r.name);
  assert.deepEqual(tables, ["messages", "sessions", "sqlite_sequence", "todos"]);
  db.close();
});

Deno.test("SessionStore refuses a database written by a newer schema version", () => {
  using dir = tempDir();
  const db = new DatabaseSync(`${dir.path}/s.db`);
  db.exec(`PRAGMA user_version = ${SCHEMA_VERSION + 1}`);
  db.close();
  assert.throws(
    () => new SessionStore(`${dir.path}/s.db`),
    new RegExp(`schema version is ${SCHEMA_VERSION + 1}, this program knows ${SCHEMA_VERSION}$`),
  );
});

Deno.test("SessionStore replaces the index by updated_at of a database an earlier release wrote, keeping its data and version", () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const v1 = new DatabaseSync(path);
  // The schema as earlier releases wrote it: sessions were also indexed by updated_at.
  v1.exec(`
    CREATE TABLE sessions (id TEXT PRIMARY KEY, user_id TEXT NOT NULL, summary TEXT,
      turn_count INTEGER NOT NULL DEFAULT 0, compacted_turns INTEGER NOT NULL DEFAULT 0,
      created_at TEXT NOT NULL, updated_at TEXT NOT NULL);
    CREATE INDEX sessions_by_user ON sessions(user_id, updated_at);
    CREATE TABLE messages (id TEXT NOT NULL,
      session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE,
      role TEXT NOT NULL CHECK (role IN ('user', 'assistant', 'tool', 'runtime')),
      content TEXT, tool_calls TEXT, tool_call_id TEXT, created_at TEXT NOT NULL, PRIMARY KEY (session_id, id));
    CREATE TABLE todos (id INTEGER PRIMARY KEY AUTOINCREMENT,
      session_id TEXT NOT NULL REFERENCES sessions(id) ON DELETE CASCADE, text TEXT NOT NULL,
      completed INTEGER NOT NULL DEFAULT 0, created_at TEXT NOT NULL, completed_at TEXT);
    CREATE INDEX todos_by_session ON todos(session_id);
    INSERT INTO sessions VALUES ('old', 'u', NULL, 1, 0, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:01.000Z');
    INSERT INTO sessions VALUES ('new', 'u', NULL, 0, 0, '2026-01-01T00:00:00.000Z', '2026-01-01T00:00:02.000Z');
    INSERT INTO messages VALUES ('m1', 'old', 'user', 'hi', NULL, NULL, '2026-01-01T00:00:01.000Z');
    PRAGMA user_version = 1;
  `);
  v1.close();

  const store = new SessionStore(path);
  try {
    assert.deepEqual(store.listSessions("u").map((s) => s.id), ["new", "old"]);
    assert.deepEqual(store.messages("old").map((m) => [m.id, m.content]), [["m1", "hi"]]);
    assert.equal(store.get("old")?.turnCount, 1);
  } finally {
    store.close();
  }
  const db = new DatabaseSync(path);
  try {
    // The version stays, so an earlier release still opens the database (and finds its queries served).
    assert.equal((db.prepare("PRAGMA user_version").get() as { user_version: number }).user_version, 1);
    const indexes = db.prepare("SELECT name FROM sqlite_master WHERE type = 'index' AND sql IS NOT NULL")
      .all().map((r) => r.name);
    assert.deepEqual(indexes.sort(), ["sessions_of_user", "todos_by_session"]);
  } finally {
    db.close();
  }
});

Deno.test("SessionStore.append() is idempotent: saving the same state twice adds nothing", () => {
  const store = new SessionStore(":memory:", { now: steppingClock() });
  store.getOrCreate("s", "u");
  const state = [
    msg("1", "user", "hi"),
    msg("2", "assistant", null, { toolCalls: [{ id: "c1", name: "calculator", arguments: "{}" }] }),
    msg("3", "tool", "{}", { toolCallId: "c1" }),
    msg("4", "runtime", "[runtime] nudge"),
    msg("5", "assistant", "bye"),
  ];
  assert.equal(store.append("s", state), 5);
  const once = store.messages("s");
  const turns = store.get("s")!.turnCount;
  assert.equal(store.append("s", state), 0);
  assert.deepEqual(store.messages("s"), once);
  assert.equal(store.get("s")!.turnCount, turns);
  assert.equal(turns, 1, "only real user messages count as turns");
  assert.deepEqual(once[1].toolCalls, [{ id: "c1", name: "calculator", arguments: "{}" }]);
  assert.equal(once[2].toolCallId, "c1");
  store.close();
});

Deno.test("SessionStore.append() commits all of a tool turn or none of it", () => {
  const store = new SessionStore(":memory:");
  store.getOrCreate("s", "u");
  const bad = [
    msg("a", "assistant", null, { toolCalls: [{ id: "c1", name: "x", arguments: "{}" }] }),
    // An invalid role makes the second insert fail inside the transaction.
    msg("b", "bogus" as StoredMessage["role"], "{}", { toolCallId: "c1" }),
  ];
  assert.throws(() => store.append("s", bad), /CHECK constraint failed/);
  assert.deepEqual(store.messages("s"), []);
  store.close();
});

Deno.test("SessionStore keeps sessions of different users apart and hides them from each other", () => {
  const store = new SessionStore(":memory:", { now: steppingClock() });
  store.getOrCreate("mine", "alice");
  store.getOrCreate("other", "alice");
  assert.throws(
    () => store.getOrCreate("mine", "bob"),
    (e) => e instanceof SessionError && e.reason === "not_found",
  );
  store.append("other", [msg("m", "user", "x")]);
  assert.deepEqual(store.listSessions("alice").map((s) => s.id), ["other", "mine"], "newest first");
  assert.deepEqual(store.listSessions("bob"), []);
  store.close();
});

Deno.test("SessionStore scopes todos to their session", () => {
  const store = new SessionStore(":memory:", { now: steppingClock() });
  store.getOrCreate("a", "u");
  store.getOrCreate("b", "u");
  const todo = store.addTodo("a", "write tests");
  assert.equal(store.completeTodo("b", todo.id), null, "another session cannot complete it");
  const done = store.completeTodo("a", todo.id)!;
  assert.equal(done.completed, true);
  assert.ok(done.completedAt !== null);
  assert.deepEqual(store.listTodos("b"), []);
  store.close();
});

Deno.test("validateId() accepts 1-128 characters of [A-Za-z0-9._:-] and names what is wrong otherwise", () => {
  for (const ok of ["a", "A-window-1", "x.y_z:1", "a".repeat(128)]) assert.equal(validateId(ok), ok);
  for (const bad of ["", "a".repeat(129), "with space", "semi;colon", "quote'", "é", "a/b"]) {
    assert.throws(() => validateId(bad), /Invalid session id .*expected 1-128 characters/);
  }
  assert.throws(() => validateId(42), /Invalid session id number/);
});

Deno.test("SessionStore parameterizes queries: quotes and semicolons are stored verbatim", () => {
  const store = new SessionStore(":memory:");
  store.getOrCreate("s", "u");
  const nasty = `'); DROP TABLE messages; --"\u0001\u00ff`;
  store.append("s", [msg("m1", "user", nasty)]);
  store.addTodo("s", nasty);
  assert.equal(store.messages("s")[0].content, nasty);
  assert.equal(store.listTodos("s")[0].text, nasty);
  store.close();
});

Deno.test("two SessionStore handles on one file write concurrently without 'database is locked'", () => {
  using dir = tempDir();
  const a = new SessionStore(`${dir.path}/s.db`);
  const b = new SessionStore(`${dir.path}/s.db`);
  a.getOrCreate("s", "u");
  for (let i = 0; i < 50; i++) {
    (i % 2 === 0 ? a : b).append("s", [msg(`m${i}`, "user", `turn ${i}`)]);
  }
  assert.equal(a.get("s")!.turnCount, 50);
  assert.equal(b.messages("s").length, 50);
  a.close();
  b.close();
});

Deno.test("SessionStore.applyCompaction() writes the summary and deletes exactly the cut messages, or nothing", () => {
  const store = new SessionStore(":memory:");
  store.getOrCreate("s", "u");
  store.getOrCreate("other", "u");
  store.append("s", [msg("1", "user", "a"), msg("2", "assistant", "b"), msg("3", "user", "c")]);
  store.append("other", [msg("x", "user", "theirs")]);

  assert.throws(() => store.applyCompaction("s", '{"facts":[]}', ["1", "x"], 1), /message "x" is not stored/);
  assert.equal(store.get("s")!.summary, null);
  assert.equal(store.messages("s").length, 3, "the first delete was rolled back");
  assert.equal(store.messages("other").length, 1, "another session's message is never deleted");

  store.applyCompaction("s", '{"facts":["a"]}', ["1", "2"], 1);
  assert.deepEqual(store.messages("s").map((m) => m.id), ["3"]);
  const session = store.get("s")!;
  assert.equal(session.summary, '{"facts":["a"]}');
  assert.equal(session.turnCount, 2);
  assert.equal(session.compactedTurns, 1);
  store.close();
});

Deno.test("SessionStore.deleteSession() removes the session, its messages and todos, and nothing else", () => {
  const store = new SessionStore(":memory:");
  for (const id of ["gone", "kept"]) {
    store.getOrCreate(id, "u");
    store.append(id, [msg(`${id}-1`, "user", "hi")]);
    store.addTodo(id, "t");
  }
  assert.equal(store.deleteSession("gone"), true);
  assert.equal(store.get("gone"), null);
  assert.deepEqual(store.messages("gone"), []);
  assert.deepEqual(store.listTodos("gone"), []);
  assert.equal(store.messages("kept").length, 1);
  assert.equal(store.listTodos("kept").length, 1);
  assert.equal(store.deleteSession("gone"), false);
  assert.equal(store.ping(), true);
  store.close();
  assert.equal(store.ping(), false);
});

Deno.test("SessionStore keeps message ids per session: the same id in two sessions is two messages", () => {
  const store = new SessionStore(":memory:");
  store.getOrCreate("a", "u");
  store.getOrCreate("b", "u");
  assert.equal(store.append("a", [msg("run-1:0", "user", "in a")]), 1);
  assert.equal(store.append("b", [msg("run-1:0", "user", "in b")]), 1);
  assert.equal(store.messages("b")[0].content, "in b");
  assert.equal(store.get("b")!.turnCount, 1);
  store.close();
});
