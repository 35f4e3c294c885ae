/** A session belongs to its user: the same session id under two users is two sessions that never meet. */
import assert from "node:assert/strict";
import { SessionError } from "../src/errors.ts";
import { type SessionKey, SessionStore } from "../src/store.ts";
import type { StoredMessage } from "../src/types.ts";
import { keyOf, steppingClock, storedMessage as msg, tempDir } from "./_harness.ts";

const ALICE = keyOf("default", "alice");
const BOB = keyOf("default", "bob");

/** What a store that has never read the session would return: a fresh connection, no cache. */
function reloaded(path: string, key: SessionKey): StoredMessage[] {
  const fresh = new SessionStore(path, { historyCacheSessions: 0 });
  try {
    return fresh.messages(key);
  } finally {
    fresh.close();
  }
}

Deno.test("SessionStore keeps two users' default sessions distinct: messages, todos, summary, turn_count, delete", () => {
  const store = new SessionStore(":memory:", { now: steppingClock() });
  try {
    const a = store.getOrCreate(ALICE);
    const b = store.getOrCreate(BOB);
    assert.deepEqual([a.userId, a.id, b.userId, b.id], ["alice", "default", "bob", "default"]);

    // The same message id in both: two messages, each counted in its own session.
    assert.equal(
      store.append(ALICE, [msg("run-1:0", "user", "alice 1"), msg("run-1:1", "user", "alice 2")]),
      2,
    );
    assert.equal(store.append(BOB, [msg("run-1:0", "user", "bob 1")]), 1);
    assert.deepEqual(store.messages(ALICE).map((m) => m.content), ["alice 1", "alice 2"]);
    assert.deepEqual(store.messages(BOB).map((m) => m.content), ["bob 1"]);
    assert.equal(store.get(ALICE)!.turnCount, 2);
    assert.equal(store.get(BOB)!.turnCount, 1);

    const todo = store.addTodo(ALICE, "alice's todo");
    store.addTodo(BOB, "bob's todo");
    assert.equal(store.completeTodo(BOB, todo.id), null, "bob cannot complete alice's todo by id");
    assert.equal(store.listTodos(ALICE)[0].completed, false);
    assert.deepEqual(store.listTodos(ALICE).map((t) => t.text), ["alice's todo"]);
    assert.deepEqual(store.listTodos(BOB).map((t) => t.text), ["bob's todo"]);

    store.applyCompaction(ALICE, '{"facts":["alice"]}', ["run-1:0"], 1);
    assert.throws(() => store.applyCompaction(BOB, "{}", ["run-1:1"], 1), /message "run-1:1" is not stored/);
    assert.equal(store.get(ALICE)!.summary, '{"facts":["alice"]}');
    assert.equal(store.get(ALICE)!.compactedTurns, 1);
    assert.equal(store.get(BOB)!.summary, null);
    assert.equal(store.get(BOB)!.compactedTurns, 0);
    assert.deepEqual(store.messages(BOB).map((m) => m.id), ["run-1:0"], "bob's message of the same id stays");

    assert.deepEqual(store.listSessions("alice").map((s) => s.userId), ["alice"]);
    assert.equal(store.deleteSession(BOB), true);
    assert.equal(store.get(BOB), null);
    assert.deepEqual(store.listTodos(BOB), []);
    assert.deepEqual(store.messages(ALICE).map((m) => m.content), ["alice 2"]);
    assert.deepEqual(store.listTodos(ALICE).map((t) => t.text), ["alice's todo"]);
    assert.equal(store.get(ALICE)!.turnCount, 2);
  } finally {
    store.close();
  }
});

Deno.test("SessionStore.getOrCreate() creates the caller's own session when another user has that id", () => {
  const store = new SessionStore(":memory:", { now: steppingClock() });
  try {
    store.getOrCreate(ALICE);
    store.append(ALICE, [msg("m", "user", "hers")]);
    const bobs = store.getOrCreate(BOB);
    assert.equal(bobs.userId, "bob");
    assert.equal(bobs.turnCount, 0, "a new session, not alice's");
    assert.equal(store.getOrCreate(ALICE).turnCount, 1, "alice's session is untouched");
    assert.deepEqual(store.listSessions("bob").map((s) => [s.userId, s.id]), [["bob", "default"]]);
    assert.deepEqual(store.listSessions("carol"), []);
  } finally {
    store.close();
  }
});

Deno.test("SessionStore checks both ids of a key before any SQL", () => {
  const store = new SessionStore(":memory:");
  try {
    const invalid = (e: unknown) => e instanceof SessionError && e.reason === "invalid_id";
    assert.throws(() => store.getOrCreate(keyOf("ok", "bad user")), invalid);
    assert.throws(() => store.getOrCreate(keyOf("bad;id", "u")), invalid);
    assert.throws(() => store.messages(keyOf("ok", "")), /Invalid user id ""/);
    assert.throws(() => store.append(keyOf("a/b", "u"), []), /Invalid session id "a\/b"/);
    assert.throws(() => store.listTodos(keyOf("ok", "x\u0000y")), invalid);
    assert.deepEqual(store.listSessions("u"), []);
  } finally {
    store.close();
  }
});

Deno.test("SessionStore's history cache stays exact per user: one user's writes never show in another's list", () => {
  using dir = tempDir();
  const path = `${dir.path}/s.db`;
  const store = new SessionStore(path, { now: steppingClock() });
  try {
    store.getOrCreate(ALICE);
    store.getOrCreate(BOB);
    store.append(ALICE, [msg("1", "user", "alice"), msg("2", "assistant", "to alice")]);
    store.append(BOB, [msg("1", "user", "bob")]);
    // Both lists are now cached; every later write must land in exactly one of them.
    assert.equal(store.messages(ALICE).length, 2);
    assert.equal(store.messages(BOB).length, 1);

    store.append(ALICE, [msg("3", "user", "alice again")]);
    assert.deepEqual(store.messages(BOB), reloaded(path, BOB));
    assert.deepEqual(store.messages(ALICE), reloaded(path, ALICE));

    store.applyCompaction(BOB, "{}", ["1"], 1);
    assert.deepEqual(store.messages(BOB), []);
    assert.deepEqual(store.messages(ALICE).map((m) => m.id), ["1", "2", "3"]);
    assert.deepEqual(store.messages(ALICE), reloaded(path, ALICE));

    store.deleteSession(ALICE);
    assert.deepEqual(store.messages(ALICE), []);
    store.getOrCreate(ALICE);
    store.append(BOB, [msg("4", "user", "bob again")]);
    assert.deepEqual(store.messages(BOB), reloaded(path, BOB));
    assert.deepEqual(store.messages(ALICE), reloaded(path, ALICE));
    assert.deepEqual(store.messages(ALICE), []);
    // A user id containing the other part's text cannot alias another pair.
    const tricky = keyOf("t:default", "alice");
    store.getOrCreate(tricky);
    store.append(tricky, [msg("x", "user", "tricky")]);
    assert.deepEqual(store.messages(keyOf("default", "alice:t")), []);
    assert.deepEqual(store.messages(tricky).map((m) => m.content), ["tricky"]);
  } finally {
    store.close();
  }
});
