/** A session belongs to its user: the same session id under two users is two sessions that never meet. */
import assert from "node:assert/strict";
import { SessionError } from "../src/errors.ts";
import { type SessionKey } from "../src/store/store.ts";
import type { StoredMessage } from "../src/types.ts";
import { keyOf, steppingClock, storedMessage as msg } from "./_harness.ts";
import { type StoreDatabase, storeTest } from "./_store_backends.ts";

const ALICE = keyOf("default", "alice");
const BOB = keyOf("default", "bob");

/** What a store that has never read the session returns: a fresh connection. */
async function reloaded(db: StoreDatabase, key: SessionKey): Promise<StoredMessage[]> {
  const fresh = await db.open();
  try {
    return await fresh.messages(key);
  } finally {
    await fresh.close();
  }
}

storeTest(
  "$Store keeps two users' default sessions distinct: messages, todos, summary, turn_count, delete",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      const a = await store.getOrCreate(ALICE);
      const b = await store.getOrCreate(BOB);
      assert.deepEqual([a.userId, a.id, b.userId, b.id], ["alice", "default", "bob", "default"]);

      // The same message id in both: two messages, each counted in its own session.
      assert.equal(
        await store.append(ALICE, [msg("run-1:0", "user", "alice 1"), msg("run-1:1", "user", "alice 2")]),
        2,
      );
      assert.equal(await store.append(BOB, [msg("run-1:0", "user", "bob 1")]), 1);
      assert.deepEqual((await store.messages(ALICE)).map((m) => m.content), ["alice 1", "alice 2"]);
      assert.deepEqual((await store.messages(BOB)).map((m) => m.content), ["bob 1"]);
      assert.equal((await store.get(ALICE))!.turnCount, 2);
      assert.equal((await store.get(BOB))!.turnCount, 1);

      const todo = await store.addTodo(ALICE, "alice's todo");
      await store.addTodo(BOB, "bob's todo");
      assert.equal(await store.completeTodo(BOB, todo.id), null, "bob cannot complete alice's todo by id");
      assert.equal((await store.listTodos(ALICE))[0].completed, false);
      assert.deepEqual((await store.listTodos(ALICE)).map((t) => t.text), ["alice's todo"]);
      assert.deepEqual((await store.listTodos(BOB)).map((t) => t.text), ["bob's todo"]);

      await store.applyCompaction(ALICE, '{"facts":["alice"]}', ["run-1:0"], 1);
      await assert.rejects(
        async () => await store.applyCompaction(BOB, "{}", ["run-1:1"], 1),
        /message "run-1:1" is not stored/,
      );
      assert.equal((await store.get(ALICE))!.summary, '{"facts":["alice"]}');
      assert.equal((await store.get(ALICE))!.compactedTurns, 1);
      assert.equal((await store.get(BOB))!.summary, null);
      assert.equal((await store.get(BOB))!.compactedTurns, 0);
      assert.deepEqual(
        (await store.messages(BOB)).map((m) => m.id),
        ["run-1:0"],
        "bob's message of the same id stays",
      );

      assert.deepEqual((await store.listSessions("alice")).map((s) => s.userId), ["alice"]);
      assert.equal(await store.deleteSession(BOB), true);
      assert.equal(await store.get(BOB), null);
      assert.deepEqual(await store.listTodos(BOB), []);
      assert.deepEqual((await store.messages(ALICE)).map((m) => m.content), ["alice 2"]);
      assert.deepEqual((await store.listTodos(ALICE)).map((t) => t.text), ["alice's todo"]);
      assert.equal((await store.get(ALICE))!.turnCount, 2);
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store.getOrCreate() creates the caller's own session when another user has that id",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      await store.getOrCreate(ALICE);
      await store.append(ALICE, [msg("m", "user", "hers")]);
      const bobs = await store.getOrCreate(BOB);
      assert.equal(bobs.userId, "bob");
      assert.equal(bobs.turnCount, 0, "a new session, not alice's");
      assert.equal((await store.getOrCreate(ALICE)).turnCount, 1, "alice's session is untouched");
      assert.deepEqual((await store.listSessions("bob")).map((s) => [s.userId, s.id]), [["bob", "default"]]);
      assert.deepEqual(await store.listSessions("carol"), []);
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store checks both ids of a key before any SQL", async (db) => {
  const store = await db.open();
  try {
    const invalid = (e: unknown) => e instanceof SessionError && e.reason === "invalid_id";
    await assert.rejects(async () => await store.getOrCreate(keyOf("ok", "bad user")), invalid);
    await assert.rejects(async () => await store.getOrCreate(keyOf("bad;id", "u")), invalid);
    await assert.rejects(async () => await store.messages(keyOf("ok", "")), /Invalid user id ""/);
    await assert.rejects(async () => await store.append(keyOf("a/b", "u"), []), /Invalid session id "a\/b"/);
    await assert.rejects(async () => await store.listTodos(keyOf("ok", "x\u0000y")), invalid);
    assert.deepEqual(await store.listSessions("u"), []);
  } finally {
    await store.close();
  }
});

storeTest(
  "$Store's history cache stays exact per user: one user's writes never show in another's list",
  async (db) => {
    const store = await db.open({ now: steppingClock() });
    try {
      await store.getOrCreate(ALICE);
      await store.getOrCreate(BOB);
      await store.append(ALICE, [msg("1", "user", "alice"), msg("2", "assistant", "to alice")]);
      await store.append(BOB, [msg("1", "user", "bob")]);
      // Both lists are now cached; every later write must land in exactly one of them.
      assert.equal((await store.messages(ALICE)).length, 2);
      assert.equal((await store.messages(BOB)).length, 1);

      await store.append(ALICE, [msg("3", "user", "alice again")]);
      assert.deepEqual(await store.messages(BOB), await reloaded(db, BOB));
      assert.deepEqual(await store.messages(ALICE), await reloaded(db, ALICE));

      await store.applyCompaction(BOB, "{}", ["1"], 1);
      assert.deepEqual(await store.messages(BOB), []);
      assert.deepEqual((await store.messages(ALICE)).map((m) => m.id), ["1", "2", "3"]);
      assert.deepEqual(await store.messages(ALICE), await reloaded(db, ALICE));

      await store.deleteSession(ALICE);
      assert.deepEqual(await store.messages(ALICE), []);
      await store.getOrCreate(ALICE);
      await store.append(BOB, [msg("4", "user", "bob again")]);
      assert.deepEqual(await store.messages(BOB), await reloaded(db, BOB));
      assert.deepEqual(await store.messages(ALICE), await reloaded(db, ALICE));
      assert.deepEqual(await store.messages(ALICE), []);
      // A user id containing the other part's text cannot alias another pair.
      const tricky = keyOf("t:default", "alice");
      await store.getOrCreate(tricky);
      await store.append(tricky, [msg("x", "user", "tricky")]);
      assert.deepEqual(await store.messages(keyOf("default", "alice:t")), []);
      assert.deepEqual((await store.messages(tricky)).map((m) => m.content), ["tricky"]);
    } finally {
      await store.close();
    }
  },
);
