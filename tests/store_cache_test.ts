import { fc } from "./_dev_deps.ts";
import assert from "node:assert/strict";
import { SessionStore } from "../src/store.ts";
import type { StoredMessage } from "../src/types.ts";
import { keyOf, storedMessage, tempDir } from "./_harness.ts";

const msg = storedMessage;

/** What a store that has never read the session would return: a fresh connection, no cache. */
function reloaded(path: string, sessionId: string): StoredMessage[] {
  const fresh = new SessionStore(path, { historyCacheSessions: 0 });
  try {
    return fresh.messages(keyOf(sessionId));
  } finally {
    fresh.close();
  }
}

function toolTurn(run: string): StoredMessage[] {
  return [
    msg(`${run}:1`, "assistant", null, {
      toolCalls: [{ id: `call_${run}`, name: "calculator", arguments: '{"expression":"6*7"}' }],
    }),
    msg(`${run}:2`, "tool", '{"ok":true,"data":{"result":42}}', { toolCallId: `call_${run}` }),
  ];
}

Deno.test("SessionStore.messages() from memory equals a reload after appends, repeats, compaction and deletion", () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const store = new SessionStore(path);
  try {
    store.getOrCreate(keyOf("s"));
    store.getOrCreate(keyOf("other"));
    assert.deepEqual(store.messages(keyOf("s")), []);
    for (const run of ["r1", "r2", "r3"]) {
      store.append(keyOf("s"), [msg(`${run}:0`, "user", `question ${run}`)]);
      store.append(keyOf("s"), toolTurn(run));
      // A repeated save adds nothing to the stored list, so nothing to the cached one either.
      store.append(keyOf("s"), toolTurn(run));
      store.append(keyOf("s"), [
        msg(`${run}:3`, "assistant", "42"),
        msg(`${run}:4`, "runtime", "[runtime] nudge"),
      ]);
      assert.deepEqual(store.messages(keyOf("s")), reloaded(path, "s"));
    }
    assert.equal(store.messages(keyOf("s")).length, 15);
    store.append(keyOf("other"), [msg("o:0", "user", "elsewhere")]);
    store.applyCompaction(keyOf("s"), '{"goals":[],"facts":[],"todos":[],"unresolved":[]}', [
      "r1:0",
      "r1:1",
      "r1:2",
    ], 1);
    assert.deepEqual(store.messages(keyOf("s")), reloaded(path, "s"));
    assert.equal(store.messages(keyOf("s"))[0].id, "r1:3");
    assert.deepEqual(store.messages(keyOf("other")).map((m) => m.id), ["o:0"]);
    // A failed transaction leaves the cached list as the stored one.
    assert.throws(() => store.applyCompaction(keyOf("s"), "{}", ["r2:0", "missing"], 1), /is not stored/);
    assert.throws(() => store.append(keyOf("s"), [msg("bad", "nobody" as StoredMessage["role"], "x")]));
    assert.deepEqual(store.messages(keyOf("s")), reloaded(path, "s"));
    assert.equal(store.deleteSession(keyOf("s")), true);
    assert.deepEqual(store.messages(keyOf("s")), []);
  } finally {
    store.close();
  }
});

Deno.test("SessionStore.messages() sees what another connection committed since it last read", () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const a = new SessionStore(path);
  const b = new SessionStore(path);
  try {
    a.getOrCreate(keyOf("s"));
    a.append(keyOf("s"), [msg("a:0", "user", "from a")]);
    assert.deepEqual(a.messages(keyOf("s")).map((m) => m.id), ["a:0"]);
    b.append(keyOf("s"), [msg("b:0", "user", "from b")]);
    assert.deepEqual(a.messages(keyOf("s")).map((m) => m.id), ["a:0", "b:0"]);
    // Both orders of writers: a's own write after b's is in its list too.
    b.append(keyOf("s"), [msg("b:1", "assistant", "b again")]);
    a.append(keyOf("s"), [msg("a:1", "user", "a again")]);
    assert.deepEqual(a.messages(keyOf("s")).map((m) => m.id), ["a:0", "b:0", "b:1", "a:1"]);
    b.applyCompaction(
      keyOf("s"),
      '{"goals":[],"facts":[],"todos":[],"unresolved":[]}',
      ["a:0", "b:0", "b:1"],
      2,
    );
    assert.deepEqual(a.messages(keyOf("s")).map((m) => m.id), ["a:1"]);
    assert.equal(b.deleteSession(keyOf("s")), true);
    assert.deepEqual(a.messages(keyOf("s")), []);
  } finally {
    a.close();
    b.close();
  }
});

Deno.test("SessionStore.messages() hands out a fresh array of frozen messages", () => {
  const store = new SessionStore(":memory:");
  try {
    store.getOrCreate(keyOf("s"));
    store.append(keyOf("s"), [msg("r:0", "user", "hi"), ...toolTurn("r")]);
    const first = store.messages(keyOf("s"));
    first.push(msg("local", "user", "not stored"));
    assert.equal(store.messages(keyOf("s")).length, 3);
    assert.throws(() => {
      (store.messages(keyOf("s"))[0] as { content: string | null }).content = "changed";
    }, TypeError);
    assert.throws(
      () => store.messages(keyOf("s"))[1].toolCalls!.push({ id: "x", name: "y", arguments: "{}" }),
      TypeError,
    );
    assert.equal(store.messages(keyOf("s"))[0].content, "hi");
  } finally {
    store.close();
  }
});

Deno.test("SessionStore keeps at most historyCacheSessions lists, and every list stays right", () => {
  const store = new SessionStore(":memory:", { historyCacheSessions: 2 });
  try {
    for (const id of ["a", "b", "c"]) {
      store.getOrCreate(keyOf(id));
      store.append(keyOf(id), [msg(`${id}:0`, "user", id)]);
      store.messages(keyOf(id));
    }
    // "a" fell out of the cache; writing to it and reading it back still gives the stored list.
    store.append(keyOf("a"), [msg("a:1", "assistant", "A")]);
    for (const id of ["a", "b", "c"]) store.append(keyOf(id), [msg(`${id}:2`, "user", "again")]);
    assert.deepEqual(store.messages(keyOf("a")).map((m) => m.id), ["a:0", "a:1", "a:2"]);
    assert.deepEqual(store.messages(keyOf("b")).map((m) => m.id), ["b:0", "b:2"]);
    assert.deepEqual(store.messages(keyOf("c")).map((m) => m.id), ["c:0", "c:2"]);
    assert.throws(() => new SessionStore(":memory:", { historyCacheSessions: -1 }), RangeError);
  } finally {
    store.close();
  }
});

Deno.test("SessionStore returns text with NUL characters whole, from memory and from disk, and todos too", () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const store = new SessionStore(path);
  try {
    store.getOrCreate(keyOf("s"));
    const text = "before\u0000after \ufeffbom";
    store.messages(keyOf("s")); // in memory from here on: the append adds to the cached list
    store.append(keyOf("s"), [
      msg("r:0", "user", "\ufeffstarts with a BOM"),
      msg("r:1", "tool", text, { toolCallId: "call\u0000x" }),
      // A lone surrogate has no UTF-8 form: it is stored as U+FFFD, and memory says the same as disk.
      msg("r:2", "assistant", "lone \ud800 surrogate"),
    ]);
    const cached = store.messages(keyOf("s"));
    assert.deepEqual(cached, reloaded(path, "s"));
    assert.equal(cached[0].content, "\ufeffstarts with a BOM");
    assert.equal(cached[1].content, text);
    assert.equal(cached[1].toolCallId, "call\u0000x");
    assert.equal(cached[2].content, "lone \ufffd surrogate");
    const todo = store.addTodo(keyOf("s"), "buy\u0000milk");
    assert.equal(todo.text, "buy\u0000milk");
    assert.equal(store.listTodos(keyOf("s"))[0].text, "buy\u0000milk");
    assert.equal(store.completeTodo(keyOf("s"), todo.id)?.text, "buy\u0000milk");
  } finally {
    store.close();
  }
});

Deno.test("SessionStore keeps in memory each message as a reload returns it, every field", () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const store = new SessionStore(path);
  try {
    store.getOrCreate(keyOf("s"));
    const call = { id: "c\ud800", name: "calculator", arguments: '{"expression":"1+1"}', extra: "kept" };
    const input = [
      msg("id\u0000nul", "user", "x", { createdAt: "2026\u0000" }),
      msg("lone\udc00", "assistant", null, { toolCalls: [call], createdAt: "t\ud800" }),
      // Unknown keys are not stored, and an empty list of calls is stored as none.
      { ...msg("empty", "assistant", "a", { toolCalls: [] }), note: "dropped" } as StoredMessage,
      msg("t", "tool", "r", { toolCallId: "c\ud800" }),
    ];
    // Read first, so the session's list is in memory and the append adds to it, as in a turn.
    assert.deepEqual(store.messages(keyOf("s")), []);
    assert.equal(store.append(keyOf("s"), input), 4);
    const cached = store.messages(keyOf("s"));
    assert.deepEqual(cached, reloaded(path, "s"));
    assert.equal(cached[0].id, "id\u0000nul");
    assert.equal(cached[0].createdAt, "2026\u0000");
    assert.equal(cached[1].id, "lone\ufffd");
    assert.equal(cached[1].createdAt, "t\ufffd");
    // The calls come back through their JSON, which escapes a lone surrogate rather than replacing it.
    assert.deepEqual(cached[1].toolCalls, [call]);
    assert.equal("toolCalls" in cached[2], false);
    assert.equal("note" in cached[2], false);
    assert.equal(cached[3].toolCallId, "c\ufffd");
    assert.ok(cached.every((m) => Object.isFrozen(m)));
    // The caller's objects are neither frozen nor changed.
    assert.equal(Object.isFrozen(input[1]), false);
    assert.equal(Object.isFrozen(call), false);
    assert.equal(input[1].id, "lone\udc00");
    // Compaction by the caller's own ids: SQLite matches the lone surrogate as U+FFFD, and so does memory.
    store.applyCompaction(keyOf("s"), "{}", [input[0].id, input[1].id], 1);
    assert.deepEqual(store.messages(keyOf("s")), reloaded(path, "s"));
    assert.deepEqual(store.messages(keyOf("s")).map((m) => m.id), ["empty", "t"]);
  } finally {
    store.close();
  }
});

Deno.test("SessionStore.append() that the database refuses midway leaves memory as the database: unchanged", () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const store = new SessionStore(path);
  try {
    store.getOrCreate(keyOf("s"));
    store.append(keyOf("s"), [msg("a", "user", "hi")]);
    const before = store.messages(keyOf("s"));
    // The role passes the type check and fails SQLite's CHECK after the first row went in: all rolls back.
    const broken = msg("c", "nobody" as StoredMessage["role"], "x");
    assert.throws(
      () => store.append(keyOf("s"), [msg("b", "assistant", "fine"), broken]),
      /CHECK constraint failed/,
    );
    assert.deepEqual(store.messages(keyOf("s")), before);
    assert.deepEqual(store.messages(keyOf("s")), reloaded(path, "s"));
    assert.equal(store.get(keyOf("s"))?.turnCount, 1);
  } finally {
    store.close();
  }
});

Deno.test("SessionStore.append() stores null or absent tool calls and call id as none", () => {
  const store = new SessionStore(":memory:");
  try {
    store.getOrCreate(keyOf("s"));
    store.messages(keyOf("s"));
    const nulls = { toolCalls: null, toolCallId: null } as unknown as Partial<StoredMessage>;
    assert.equal(store.append(keyOf("s"), [msg("a", "assistant", "x", nulls)]), 1);
    const [stored] = store.messages(keyOf("s"));
    assert.equal("toolCalls" in stored, false);
    assert.equal("toolCallId" in stored, false);
  } finally {
    store.close();
  }
});

Deno.test("SessionStore.append() refuses a message with a field of the wrong type and stores none of the save", () => {
  const store = new SessionStore(":memory:");
  try {
    store.getOrCreate(keyOf("s"));
    const bad: [Record<string, unknown>, RegExp][] = [
      [{ content: 42 }, /message 1: "content" must be a string or null, got number/],
      [{ id: undefined }, /message 1: "id" must be a string, got undefined/],
      [{ createdAt: new Date() }, /message 1: "createdAt" must be a string, got object/],
      [{ toolCallId: 7 }, /message 1: "toolCallId" must be a string, null or absent, got number/],
      [{ toolCalls: "calls" }, /message 1: "toolCalls" must be an array, got string/],
      [{ content: undefined }, /message 1: "content" must be a string or null, got undefined/],
      [{ role: null }, /message 1: "role" must be a string, got null/],
    ];
    for (const [override, error] of bad) {
      const broken = { ...msg("b", "tool", "x"), ...override } as unknown as StoredMessage;
      assert.throws(() => store.append(keyOf("s"), [msg("a", "user", "hi"), broken]), error);
      assert.deepEqual(store.messages(keyOf("s")), []);
      assert.equal(store.get(keyOf("s"))?.turnCount, 0);
    }
  } finally {
    store.close();
  }
});

// Any code point, and often the ones a store can get wrong: lone surrogates (which the "binary" unit never
// yields), NUL and a BOM. What a reload returns of them is the test's oracle.
const ANY_TEXT = fc.string({
  unit: fc.oneof(
    fc.constantFrom("\ud800", "\udfff", "\u0000", "\ufeff"),
    fc.string({ unit: "binary", minLength: 1, maxLength: 1 }),
  ),
  maxLength: 12,
});

Deno.test("SessionStore: a property, any text in any field is in memory what a reload returns", () => {
  using dir = tempDir();
  let run = 0;
  const call = fc.record({ id: ANY_TEXT, name: ANY_TEXT, arguments: ANY_TEXT });
  const message = fc.record({
    role: fc.constantFrom<StoredMessage["role"]>("user", "assistant", "tool", "runtime"),
    content: fc.option(ANY_TEXT),
    createdAt: ANY_TEXT,
    toolCalls: fc.option(fc.array(call, { maxLength: 2 }), { nil: undefined }),
    toolCallId: fc.option(ANY_TEXT, { nil: undefined }),
  }, { requiredKeys: ["role", "content", "createdAt"] });
  fc.assert(
    fc.property(fc.array(fc.tuple(ANY_TEXT, message), { minLength: 1, maxLength: 6 }), (drafts) => {
      const path = `${dir.path}/p-${run++}.db`;
      const store = new SessionStore(path);
      try {
        store.getOrCreate(keyOf("s"));
        store.messages(keyOf("s"));
        // Ids made distinct after their stored form, which is what the primary key sees.
        const input = drafts.map(([id, m], i) => ({ ...m, id: `${i}:${id}` }) as StoredMessage);
        store.append(keyOf("s"), input);
        assert.deepEqual(store.messages(keyOf("s")), reloaded(path, "s"));
      } finally {
        store.close();
      }
    }),
    { numRuns: 150 },
  );
});
