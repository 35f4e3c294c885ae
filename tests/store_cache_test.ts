import { fc } from "./_fast_check.ts";
import assert from "node:assert/strict";
import type { StoredMessage } from "../src/types.ts";
import { keyOf, storedMessage } from "./_harness.ts";
import { type StoreDatabase, storeTest } from "./_store_backends.ts";

const msg = storedMessage;

/** What a store that has never read the session returns: a fresh connection. */
async function reloaded(db: StoreDatabase, sessionId: string): Promise<StoredMessage[]> {
  const fresh = await db.open();
  try {
    return await fresh.messages(keyOf(sessionId));
  } finally {
    await fresh.close();
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

storeTest(
  "$Store.messages() from memory equals a reload after appends, repeats, compaction and deletion",
  async (db) => {
    const store = await db.open();
    try {
      await store.getOrCreate(keyOf("s"));
      await store.getOrCreate(keyOf("other"));
      assert.deepEqual(await store.messages(keyOf("s")), []);
      for (const run of ["r1", "r2", "r3"]) {
        await store.append(keyOf("s"), [msg(`${run}:0`, "user", `question ${run}`)]);
        await store.append(keyOf("s"), toolTurn(run));
        // A repeated save adds nothing to the stored list, so nothing to the cached one either.
        await store.append(keyOf("s"), toolTurn(run));
        await store.append(keyOf("s"), [
          msg(`${run}:3`, "assistant", "42"),
          msg(`${run}:4`, "runtime", "[runtime] nudge"),
        ]);
        assert.deepEqual(await store.messages(keyOf("s")), await reloaded(db, "s"));
      }
      assert.equal((await store.messages(keyOf("s"))).length, 15);
      await store.append(keyOf("other"), [msg("o:0", "user", "elsewhere")]);
      await store.applyCompaction(keyOf("s"), '{"goals":[],"facts":[],"todos":[],"unresolved":[]}', [
        "r1:0",
        "r1:1",
        "r1:2",
      ], 1);
      assert.deepEqual(await store.messages(keyOf("s")), await reloaded(db, "s"));
      assert.equal((await store.messages(keyOf("s")))[0].id, "r1:3");
      assert.deepEqual((await store.messages(keyOf("other"))).map((m) => m.id), ["o:0"]);
      // A failed transaction leaves the cached list as the stored one.
      await assert.rejects(
        async () => await store.applyCompaction(keyOf("s"), "{}", ["r2:0", "missing"], 1),
        /is not stored/,
      );
      await assert.rejects(async () =>
        await store.append(keyOf("s"), [msg("bad", "nobody" as StoredMessage["role"], "x")])
      );
      assert.deepEqual(await store.messages(keyOf("s")), await reloaded(db, "s"));
      assert.equal(await store.deleteSession(keyOf("s")), true);
      assert.deepEqual(await store.messages(keyOf("s")), []);
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store.messages() sees what another connection committed since it last read", async (db) => {
  const a = await db.open();
  const b = await db.open();
  try {
    await a.getOrCreate(keyOf("s"));
    await a.append(keyOf("s"), [msg("a:0", "user", "from a")]);
    assert.deepEqual((await a.messages(keyOf("s"))).map((m) => m.id), ["a:0"]);
    await b.append(keyOf("s"), [msg("b:0", "user", "from b")]);
    assert.deepEqual((await a.messages(keyOf("s"))).map((m) => m.id), ["a:0", "b:0"]);
    // Both orders of writers: a's own write after b's is in its list too.
    await b.append(keyOf("s"), [msg("b:1", "assistant", "b again")]);
    await a.append(keyOf("s"), [msg("a:1", "user", "a again")]);
    assert.deepEqual((await a.messages(keyOf("s"))).map((m) => m.id), ["a:0", "b:0", "b:1", "a:1"]);
    await b.applyCompaction(
      keyOf("s"),
      '{"goals":[],"facts":[],"todos":[],"unresolved":[]}',
      ["a:0", "b:0", "b:1"],
      2,
    );
    assert.deepEqual((await a.messages(keyOf("s"))).map((m) => m.id), ["a:1"]);
    assert.equal(await b.deleteSession(keyOf("s")), true);
    assert.deepEqual(await a.messages(keyOf("s")), []);
  } finally {
    await a.close();
    await b.close();
  }
});

storeTest("$Store.messages() hands out a fresh array of frozen messages", async (db) => {
  const store = await db.open();
  try {
    await store.getOrCreate(keyOf("s"));
    await store.append(keyOf("s"), [msg("r:0", "user", "hi"), ...toolTurn("r")]);
    const first = await store.messages(keyOf("s"));
    first.push(msg("local", "user", "not stored"));
    assert.equal((await store.messages(keyOf("s"))).length, 3);
    await assert.rejects(async () => {
      ((await store.messages(keyOf("s")))[0] as { content: string | null }).content = "changed";
    }, TypeError);
    await assert.rejects(
      async () =>
        (await store.messages(keyOf("s")))[1].toolCalls!.push({ id: "x", name: "y", arguments: "{}" }),
      TypeError,
    );
    assert.equal((await store.messages(keyOf("s")))[0].content, "hi");
  } finally {
    await store.close();
  }
});

storeTest(
  "$Store keeps every session's list right while writes to several sessions interleave",
  async (db) => {
    const store = await db.open();
    try {
      for (const id of ["a", "b", "c"]) {
        await store.getOrCreate(keyOf(id));
        await store.append(keyOf(id), [msg(`${id}:0`, "user", id)]);
        await store.messages(keyOf(id));
      }
      await store.append(keyOf("a"), [msg("a:1", "assistant", "A")]);
      for (const id of ["a", "b", "c"]) await store.append(keyOf(id), [msg(`${id}:2`, "user", "again")]);
      assert.deepEqual((await store.messages(keyOf("a"))).map((m) => m.id), ["a:0", "a:1", "a:2"]);
      assert.deepEqual((await store.messages(keyOf("b"))).map((m) => m.id), ["b:0", "b:2"]);
      assert.deepEqual((await store.messages(keyOf("c"))).map((m) => m.id), ["c:0", "c:2"]);
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store returns text with NUL characters whole, from memory and from disk, and todos too",
  async (db) => {
    const store = await db.open();
    try {
      await store.getOrCreate(keyOf("s"));
      const text = "before\u0000after \ufeffbom";
      await store.messages(keyOf("s")); // in memory from here on: the append adds to the cached list
      await store.append(keyOf("s"), [
        msg("r:0", "user", "\ufeffstarts with a BOM"),
        msg("r:1", "tool", text, { toolCallId: "call\u0000x" }),
        // A lone surrogate has no UTF-8 form: it is stored as U+FFFD, and memory says the same as disk.
        msg("r:2", "assistant", "lone \ud800 surrogate"),
      ]);
      const cached = await store.messages(keyOf("s"));
      assert.deepEqual(cached, await reloaded(db, "s"));
      assert.equal(cached[0].content, "\ufeffstarts with a BOM");
      assert.equal(cached[1].content, text);
      assert.equal(cached[1].toolCallId, "call\u0000x");
      assert.equal(cached[2].content, "lone \ufffd surrogate");
      const todo = await store.addTodo(keyOf("s"), "buy\u0000milk");
      assert.equal(todo.text, "buy\u0000milk");
      assert.equal((await store.listTodos(keyOf("s")))[0].text, "buy\u0000milk");
      assert.equal((await store.completeTodo(keyOf("s"), todo.id))?.text, "buy\u0000milk");
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store keeps in memory each message as a reload returns it, every field", async (db) => {
  const store = await db.open();
  try {
    await store.getOrCreate(keyOf("s"));
    const call = { id: "c\ud800", name: "calculator", arguments: '{"expression":"1+1"}', extra: "kept" };
    const input = [
      msg("id\u0000nul", "user", "x", { createdAt: "2026\u0000" }),
      msg("lone\udc00", "assistant", null, { toolCalls: [call], createdAt: "t\ud800" }),
      // Unknown keys are not stored, and an empty list of calls is stored as none.
      { ...msg("empty", "assistant", "a", { toolCalls: [] }), note: "dropped" } as StoredMessage,
      msg("t", "tool", "r", { toolCallId: "c\ud800" }),
    ];
    // Read first, so the session's list is in memory and the append adds to it, as in a turn.
    assert.deepEqual(await store.messages(keyOf("s")), []);
    assert.equal(await store.append(keyOf("s"), input), 4);
    const cached = await store.messages(keyOf("s"));
    assert.deepEqual(cached, await reloaded(db, "s"));
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
    await store.applyCompaction(keyOf("s"), "{}", [input[0].id, input[1].id], 1);
    assert.deepEqual(await store.messages(keyOf("s")), await reloaded(db, "s"));
    assert.deepEqual((await store.messages(keyOf("s"))).map((m) => m.id), ["empty", "t"]);
  } finally {
    await store.close();
  }
});

storeTest(
  "$Store.append() that the database refuses midway leaves memory as the database: unchanged",
  async (db) => {
    const store = await db.open();
    try {
      await store.getOrCreate(keyOf("s"));
      await store.append(keyOf("s"), [msg("a", "user", "hi")]);
      const before = await store.messages(keyOf("s"));
      // The role passes the type check and fails SQLite's CHECK after the first row went in: all rolls back.
      const broken = msg("c", "nobody" as StoredMessage["role"], "x");
      await assert.rejects(
        async () => await store.append(keyOf("s"), [msg("b", "assistant", "fine"), broken]),
        /check constraint/i,
      );
      assert.deepEqual(await store.messages(keyOf("s")), before);
      assert.deepEqual(await store.messages(keyOf("s")), await reloaded(db, "s"));
      assert.equal((await store.get(keyOf("s")))?.turnCount, 1);
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store.append() stores null or absent tool calls and call id as none", async (db) => {
  const store = await db.open();
  try {
    await store.getOrCreate(keyOf("s"));
    await store.messages(keyOf("s"));
    const nulls = { toolCalls: null, toolCallId: null } as unknown as Partial<StoredMessage>;
    assert.equal(await store.append(keyOf("s"), [msg("a", "assistant", "x", nulls)]), 1);
    const [stored] = await store.messages(keyOf("s"));
    assert.equal("toolCalls" in stored, false);
    assert.equal("toolCallId" in stored, false);
  } finally {
    await store.close();
  }
});

storeTest(
  "$Store.append() refuses a message with a field of the wrong type and stores none of the save",
  async (db) => {
    const store = await db.open();
    try {
      await store.getOrCreate(keyOf("s"));
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
        await assert.rejects(
          async () => await store.append(keyOf("s"), [msg("a", "user", "hi"), broken]),
          error,
        );
        assert.deepEqual(await store.messages(keyOf("s")), []);
        assert.equal((await store.get(keyOf("s")))?.turnCount, 0);
      }
    } finally {
      await store.close();
    }
  },
);

// Any code point, and often the ones a store can get wrong: lone surrogates (which the "binary" unit never
// yields), NUL and a BOM. What a reload returns of them is the test's oracle.
const ANY_TEXT = fc.string({
  unit: fc.oneof(
    fc.constantFrom("\ud800", "\udfff", "\u0000", "\ufeff"),
    fc.string({ unit: "binary", minLength: 1, maxLength: 1 }),
  ),
  maxLength: 12,
});

storeTest(
  "$Store: a property, any text in any field is in memory what a reload returns",
  async (_db, backend) => {
    const call = fc.record({ id: ANY_TEXT, name: ANY_TEXT, arguments: ANY_TEXT });
    const message = fc.record({
      role: fc.constantFrom<StoredMessage["role"]>("user", "assistant", "tool", "runtime"),
      content: fc.option(ANY_TEXT),
      createdAt: ANY_TEXT,
      toolCalls: fc.option(fc.array(call, { maxLength: 2 }), { nil: undefined }),
      toolCallId: fc.option(ANY_TEXT, { nil: undefined }),
    }, { requiredKeys: ["role", "content", "createdAt"] });
    await fc.assert(
      fc.asyncProperty(
        fc.array(fc.tuple(ANY_TEXT, message), { minLength: 1, maxLength: 6 }),
        async (drafts) => {
          await using db = await backend.fresh();
          const store = await db.open();
          try {
            await store.getOrCreate(keyOf("s"));
            await store.messages(keyOf("s"));
            // Ids made distinct after their stored form, which is what the primary key sees.
            const input = drafts.map(([id, m], i) => ({ ...m, id: `${i}:${id}` }) as StoredMessage);
            await store.append(keyOf("s"), input);
            assert.deepEqual(await store.messages(keyOf("s")), await reloaded(db, "s"));
          } finally {
            await store.close();
          }
        },
      ),
      { numRuns: backend.runs(150) },
    );
  },
);

storeTest(
  "$Store.messages() equals a reload after the newest messages are discarded and new ones appended",
  async (db) => {
    const store = await db.open();
    try {
      await store.getOrCreate(keyOf("s"));
      await store.append(keyOf("s"), [msg("r1:0", "user", "one"), msg("r1:1", "assistant", "1")]);
      assert.equal((await store.messages(keyOf("s"))).length, 2);
      // The table's last rows go: SQLite may give their rowids to the next rows, which must still be read.
      assert.equal(await store.discardMessages(keyOf("s"), ["r1:1"]), 1);
      await store.append(keyOf("s"), [msg("r2:0", "user", "two")]);
      assert.deepEqual((await store.messages(keyOf("s"))).map((m) => m.id), ["r1:0", "r2:0"]);
      assert.deepEqual(await store.messages(keyOf("s")), await reloaded(db, "s"));
      // An older message goes (as compaction cuts them): the list in memory loses it too.
      await store.applyCompaction(keyOf("s"), "{}", ["r1:0"], 1);
      await store.append(keyOf("s"), [msg("r3:0", "user", "three")]);
      assert.deepEqual((await store.messages(keyOf("s"))).map((m) => m.id), ["r2:0", "r3:0"]);
      assert.deepEqual(await store.messages(keyOf("s")), await reloaded(db, "s"));
    } finally {
      await store.close();
    }
  },
);
