import assert from "node:assert/strict";
import { DatabaseSync } from "node:sqlite";
import { SCHEMA_VERSION, SqliteStore } from "../src/store/sqlite.ts";
import { validateId } from "../src/store/store.ts";
import { traceTableOf } from "../src/store/open.ts";
import type { StoredMessage } from "../src/types.ts";
import { keyOf, steppingClock, storedMessage, tempDir } from "./_harness.ts";
import { storeTest } from "./_store_backends.ts";

const msg = storedMessage;

Deno.test("SqliteStore creates the schema with WAL and records its version", () => {
  using dir = tempDir();
  const store = new SqliteStore(`${dir.path}/s.db`);
  store.close();
  const db = new DatabaseSync(`${dir.path}/s.db`);
  assert.equal((db.prepare("PRAGMA journal_mode").get() as { journal_mode: string }).journal_mode, "wal");
  assert.equal(
    (db.prepare("PRAGMA user_version").get() as { user_version: number }).user_version,
    SCHEMA_VERSION,
  );
  const tables = db.prepare("SELECT name FROM sqlite_master WHERE type = 'table' ORDER BY name").all()
    .map((r) => r.name);
  assert.deepEqual(tables, [
    "idempotency_keys",
    "messages",
    "pending_steps",
    "responses",
    "session_leases",
    "session_usage",
    "sessions",
    "sqlite_sequence",
    "todos",
    "trace_events",
    "usage_daily",
    "user_memory",
    // The full-text index and its shadow tables.
    "user_memory_words",
    "user_memory_words_config",
    "user_memory_words_data",
    "user_memory_words_docsize",
    "user_memory_words_idx",
  ]);
  db.close();
});

Deno.test("SqliteStore refuses a database written by a newer schema version", () => {
  using dir = tempDir();
  const db = new DatabaseSync(`${dir.path}/s.db`);
  db.exec(`PRAGMA user_version = ${SCHEMA_VERSION + 1}`);
  db.close();
  assert.throws(
    () => new SqliteStore(`${dir.path}/s.db`),
    new RegExp(`schema version is ${SCHEMA_VERSION + 1}, this program knows ${SCHEMA_VERSION}$`),
  );
});

storeTest("$Store.append() is idempotent: saving the same state twice adds nothing", async (db) => {
  const store = await db.open({ now: steppingClock() });
  await store.getOrCreate(keyOf("s"));
  const state = [
    msg("1", "user", "hi"),
    msg("2", "assistant", null, { toolCalls: [{ id: "c1", name: "calculator", arguments: "{}" }] }),
    msg("3", "tool", "{}", { toolCallId: "c1" }),
    msg("4", "runtime", "[runtime] nudge"),
    msg("5", "assistant", "bye"),
  ];
  assert.equal(await store.append(keyOf("s"), state), 5);
  const once = await store.messages(keyOf("s"));
  const turns = (await store.get(keyOf("s")))!.turnCount;
  assert.equal(await store.append(keyOf("s"), state), 0);
  assert.deepEqual(await store.messages(keyOf("s")), once);
  assert.equal((await store.get(keyOf("s")))!.turnCount, turns);
  assert.equal(turns, 1, "only real user messages count as turns");
  assert.deepEqual(once[1].toolCalls, [{ id: "c1", name: "calculator", arguments: "{}" }]);
  assert.equal(once[2].toolCallId, "c1");
  await store.close();
});

storeTest("$Store.append() keeps its calibration whether or not it adds a message", async (db) => {
  const store = await db.open();
  try {
    const key = keyOf("s");
    await store.getOrCreate(key);
    const first = { tokens: 10, through: "r:0", fixed: "aaaaaaaa" };
    await store.append(key, [storedMessage("r:0", "user", "hi")], { calibration: first });
    assert.deepEqual((await store.get(key))!.calibration, first);
    // A repeated save adds no message: its calibration is stored all the same.
    const again = { tokens: 12, through: "r:0", fixed: "bbbbbbbb" };
    await store.append(key, [storedMessage("r:0", "user", "hi")], { calibration: again });
    assert.deepEqual((await store.get(key))!.calibration, again);
    // Without one, the stored calibration stays.
    await store.append(key, [storedMessage("r:1", "assistant", "yo")]);
    assert.deepEqual((await store.get(key))!.calibration, again);
  } finally {
    await store.close();
  }
});

storeTest("$Store.append() commits all of a tool turn or none of it", async (db) => {
  const store = await db.open();
  await store.getOrCreate(keyOf("s"));
  const bad = [
    msg("a", "assistant", null, { toolCalls: [{ id: "c1", name: "x", arguments: "{}" }] }),
    // An invalid role makes the second insert fail inside the transaction.
    msg("b", "bogus" as StoredMessage["role"], "{}", { toolCallId: "c1" }),
  ];
  await assert.rejects(async () => await store.append(keyOf("s"), bad), /check constraint/i);
  assert.deepEqual(await store.messages(keyOf("s")), []);
  await store.close();
});

storeTest("$Store scopes todos to their session", async (db) => {
  const store = await db.open({ now: steppingClock() });
  await store.getOrCreate(keyOf("a"));
  await store.getOrCreate(keyOf("b"));
  const todo = await store.addTodo(keyOf("a"), "write tests");
  assert.equal(await store.completeTodo(keyOf("b"), todo.id), null, "another session cannot complete it");
  const done = (await store.completeTodo(keyOf("a"), todo.id))!;
  assert.equal(done.completed, true);
  assert.ok(done.completedAt !== null);
  assert.deepEqual(await store.listTodos(keyOf("b")), []);
  await store.close();
});

storeTest(
  "$Store.addTodo() with a call key adds once per session: the call run again adds nothing",
  async (db) => {
    const store = await db.open();
    try {
      for (const id of ["a", "b"]) await store.getOrCreate(keyOf(id));
      const first = await store.addTodo(keyOf("a"), "once", { callId: "m1/c1" });
      assert.deepEqual(await store.addTodo(keyOf("a"), "once again", { callId: "m1/c1" }), first);
      assert.notEqual((await store.addTodo(keyOf("b"), "once", { callId: "m1/c1" })).id, first.id);
      await store.addTodo(keyOf("a"), "no key");
      await store.addTodo(keyOf("a"), "no key");
      assert.deepEqual((await store.listTodos(keyOf("a"))).map((t) => t.text), ["once", "no key", "no key"]);
    } finally {
      await store.close();
    }
  },
);

Deno.test("validateId() accepts 1-128 characters of [A-Za-z0-9._:-] and names what is wrong otherwise", () => {
  for (const ok of ["a", "A-window-1", "x.y_z:1", "a".repeat(128)]) assert.equal(validateId(ok), ok);
  for (const bad of ["", "a".repeat(129), "with space", "semi;colon", "quote'", "é", "a/b"]) {
    assert.throws(() => validateId(bad), /Invalid session id .*expected 1-128 characters/);
  }
  assert.throws(() => validateId(42), /Invalid session id number/);
});

storeTest("$Store parameterizes queries: quotes and semicolons are stored verbatim", async (db) => {
  const store = await db.open();
  await store.getOrCreate(keyOf("s"));
  const nasty = `'); DROP TABLE messages; --"\u0001\u00ff`;
  await store.append(keyOf("s"), [msg("m1", "user", nasty)]);
  await store.addTodo(keyOf("s"), nasty);
  assert.equal((await store.messages(keyOf("s")))[0].content, nasty);
  assert.equal((await store.listTodos(keyOf("s")))[0].text, nasty);
  await store.close();
});

storeTest("two $Store connections to one database write in turns without a lock error", async (db) => {
  const a = await db.open();
  const b = await db.open();
  await a.getOrCreate(keyOf("s"));
  for (let i = 0; i < 50; i++) {
    await (i % 2 === 0 ? a : b).append(keyOf("s"), [msg(`m${i}`, "user", `turn ${i}`)]);
  }
  assert.equal((await a.get(keyOf("s")))!.turnCount, 50);
  assert.equal((await b.messages(keyOf("s"))).length, 50);
  await a.close();
  await b.close();
});

storeTest(
  "$Store.applyCompaction() writes the summary and deletes exactly the cut messages, or nothing",
  async (db) => {
    const store = await db.open();
    await store.getOrCreate(keyOf("s"));
    await store.getOrCreate(keyOf("other"));
    await store.append(keyOf("s"), [
      msg("1", "user", "a"),
      msg("2", "assistant", "b"),
      msg("3", "user", "c"),
    ]);
    await store.append(keyOf("other"), [msg("x", "user", "theirs")]);

    await assert.rejects(
      async () => await store.applyCompaction(keyOf("s"), '{"facts":[]}', ["1", "x"], 1),
      /message "x" is not stored/,
    );
    assert.equal((await store.get(keyOf("s")))!.summary, null);
    assert.equal((await store.messages(keyOf("s"))).length, 3, "the first delete was rolled back");
    assert.equal(
      (await store.messages(keyOf("other"))).length,
      1,
      "another session's message is never deleted",
    );

    await store.applyCompaction(keyOf("s"), '{"facts":["a"]}', ["1", "2"], 1);
    assert.deepEqual((await store.messages(keyOf("s"))).map((m) => m.id), ["3"]);
    const session = (await store.get(keyOf("s")))!;
    assert.equal(session.summary, '{"facts":["a"]}');
    assert.equal(session.turnCount, 2);
    assert.equal(session.compactedTurns, 1);
    await store.close();
  },
);

storeTest(
  "$Store.deleteSession() removes the session, its messages and todos, and nothing else",
  async (db) => {
    const store = await db.open();
    for (const id of ["gone", "kept"]) {
      await store.getOrCreate(keyOf(id));
      await store.append(keyOf(id), [msg(`${id}-1`, "user", "hi")]);
      await store.addTodo(keyOf(id), "t");
    }
    assert.equal(await store.deleteSession(keyOf("gone")), true);
    assert.equal(await store.get(keyOf("gone")), null);
    assert.deepEqual(await store.messages(keyOf("gone")), []);
    assert.deepEqual(await store.listTodos(keyOf("gone")), []);
    assert.equal((await store.messages(keyOf("kept"))).length, 1);
    assert.equal((await store.listTodos(keyOf("kept"))).length, 1);
    assert.equal(await store.deleteSession(keyOf("gone")), false);
    assert.equal(await store.ping(), true);
    await store.close();
    assert.equal(await store.ping(), false);
  },
);

storeTest("$Store keeps message ids per session: the same id in two sessions is two messages", async (db) => {
  const store = await db.open();
  await store.getOrCreate(keyOf("a"));
  await store.getOrCreate(keyOf("b"));
  assert.equal(await store.append(keyOf("a"), [msg("run-1:0", "user", "in a")]), 1);
  assert.equal(await store.append(keyOf("b"), [msg("run-1:0", "user", "in b")]), 1);
  assert.equal((await store.messages(keyOf("b")))[0].content, "in b");
  assert.equal((await store.get(keyOf("b")))!.turnCount, 1);
  await store.close();
});

storeTest(
  "$Store runs writes started together on one connection each whole: 20 writers' appends, todos, discards, compactions and trace events",
  async (db) => {
    const store = await db.open();
    try {
      const key = keyOf("together");
      await store.getOrCreate(key);
      await store.append(key, [msg("old-q", "user", "old"), msg("old-a", "assistant", "old answer")]);
      const trace = traceTableOf(store)!;
      const row = (i: number) => ({
        user_id: "u",
        session_id: "together",
        run_id: `r${i}`,
        ts: "2026-01-01T00:00:00.000Z",
        line: `{"i":${i}}`,
      });
      const results = await Promise.all(Array.from({ length: 20 }, async (_, i) => {
        const write = trace.write([row(i)]);
        const added = await store.append(key, [
          msg(`q${i}`, "user", `q${i}`),
          msg(`a${i}`, "assistant", `a${i}`),
        ]);
        const todo = await store.addTodo(key, `t${i}`);
        const discarded = i % 2 === 0 ? await store.discardMessages(key, [`q${i}`, `a${i}`]) : 0;
        // Exactly one writer compacts the old turn; the others find its messages gone and change nothing.
        const compacted = await store.applyCompaction(key, `{"n":${i}}`, ["old-q", "old-a"], 1).then(
          () => true,
          () => false,
        );
        await write;
        return { added, todo: todo.id, discarded, compacted };
      }));
      assert.deepEqual(results.map((r) => r.added), Array(20).fill(2));
      assert.deepEqual(
        results.map((r) => r.discarded),
        Array.from({ length: 20 }, (_, i) => i % 2 === 0 ? 2 : 0),
      );
      assert.equal(new Set(results.map((r) => r.todo)).size, 20);
      assert.equal(results.filter((r) => r.compacted).length, 1);
      const session = (await store.get(key))!;
      const stored = await store.messages(key);
      assert.deepEqual(
        stored.map((m) => m.id).sort(),
        Array.from({ length: 10 }, (_, i) => [`a${2 * i + 1}`, `q${2 * i + 1}`]).flat().sort(),
      );
      // The invariant every write keeps: turns = compacted turns + stored user messages.
      assert.equal(session.turnCount, 11);
      assert.equal(session.compactedTurns, 1);
      const page = await trace.page({
        userId: "u",
        sessionId: "together",
        since: "2026-01-01T00:00:00.000Z",
        runId: null,
        limit: 50,
        cursor: null,
      });
      assert.equal(page.events.length, 20);
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store trace table: a page's endCursor is where a follower reads on, and latest() is the session's newest event",
  async (db) => {
    const store = await db.open();
    try {
      const trace = traceTableOf(store)!;
      const row = (i: number, session = "f") => ({
        user_id: "u",
        session_id: session,
        run_id: "r",
        ts: `2026-01-01T00:00:0${i}.000Z`,
        line: `{"i":${i}}`,
      });
      const since = "2026-01-01T00:00:00.000Z";
      const query = { userId: "u", sessionId: "f", since, runId: "r", limit: 10, cursor: null };
      assert.deepEqual(await trace.page(query), { events: [], nextCursor: null, endCursor: null });
      assert.equal(await trace.latest(query), null);
      await trace.write([row(0), row(1), row(2, "other")]);
      const first = await trace.page(query);
      assert.deepEqual(first.events, [{ i: 0 }, { i: 1 }]);
      assert.equal(first.nextCursor, null);
      assert.deepEqual(
        (await trace.page({ ...query, cursor: first.endCursor })).events,
        [],
        "nothing new yet",
      );
      await trace.write([row(3), row(4, "other")]);
      const later = await trace.page({ ...query, cursor: first.endCursor });
      assert.deepEqual(later.events, [{ i: 3 }], "only what came after, of this session");
      assert.deepEqual(await trace.latest(query), { i: 3 });
      assert.deepEqual(await trace.latest({ ...query, since: "2026-01-01T00:00:05.000Z" }), null);
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store keeps an assistant message's provider state exactly, frozen, on the message and on a paused step",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    await store.getOrCreate(keyOf("s"));
    const providerState = {
      origin: "https://api.deepseek.com deepseek-v4-pro",
      message: {
        reasoning_content: "thinking…\u0000 with a NUL",
        reasoning_details: [{ type: "reasoning.text", index: 0 }],
      },
      calls: [{ extra_content: { google: { thought_signature: "c2lnbmF0dXJl" } } }, null],
    };
    const calls = [{ id: "c1", name: "calculator", arguments: "{}" }, {
      id: "c2",
      name: "calculator",
      arguments: "{}",
    }];
    await store.append(keyOf("s"), [
      msg("1", "user", "hi"),
      msg("2", "assistant", null, { toolCalls: calls, providerState }),
    ]);
    const [, stored] = await store.messages(keyOf("s"));
    assert.deepEqual(stored.providerState, providerState);
    assert.ok(Object.isFrozen(stored.providerState?.message?.reasoning_details), "frozen all the way");
    const reopened = await db.open();
    assert.deepEqual(
      (await reopened.messages(keyOf("s")))[1].providerState,
      providerState,
      "as read from the database",
    );
    await reopened.close();

    const step = {
      runId: "r",
      turn: 2,
      step: 0,
      seq: 3,
      content: null,
      toolCalls: calls,
      asked: ["c1"],
      createdAt: "2026-01-01T00:00:00.000Z",
    };
    await store.savePending(keyOf("s"), { ...step, providerState });
    assert.deepEqual((await store.pendingStep(keyOf("s")))?.providerState, providerState);
    await assert.rejects(
      store.append(keyOf("s"), [msg("9", "user", "x", { providerState })]),
      /"providerState" needs an assistant message/,
    );
    await store.close();
  },
);
