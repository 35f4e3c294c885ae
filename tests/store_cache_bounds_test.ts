/** The store's memory of recent sessions' messages stays within its bounds: sessions and bytes. */
import assert from "node:assert/strict";
import { HISTORY_CACHE_BYTES, HISTORY_CACHE_SESSIONS, SqliteStore } from "../src/store/sqlite.ts";
import type { StoredMessage } from "../src/types.ts";
import { keyOf, storedMessage as msg } from "./_harness.ts";

/** Whether the store hands out the very objects it read before: the session's list is still in memory. */
async function kept(store: SqliteStore, id: string, before: StoredMessage[]): Promise<boolean> {
  const now = await store.messages(keyOf(id));
  assert.deepEqual(now, before);
  return now.every((m, i) => m === before[i]);
}

/** Sessions `ids`, each with one user message of `chars` characters, read once; what each read gave. */
async function readSessions(store: SqliteStore, ids: string[], chars = 10): Promise<StoredMessage[][]> {
  const lists = [];
  for (const id of ids) {
    await store.getOrCreate(keyOf(id));
    await store.append(keyOf(id), [msg(`${id}:0`, "user", "x".repeat(chars))]);
    lists.push(await store.messages(keyOf(id)));
  }
  return lists;
}

Deno.test("SqliteStore keeps 256 sessions' messages in memory by default, the least recently used leaving first", async () => {
  const store = new SqliteStore(":memory:");
  try {
    const ids = Array.from({ length: HISTORY_CACHE_SESSIONS }, (_, i) => `s${i}`);
    const lists = await readSessions(store, ids);
    // A read makes s0 the most recently used: s1 is the one the next session pushes out.
    assert.ok(await kept(store, "s0", lists[0]));
    const [extra] = await readSessions(store, ["one-more"]);
    assert.ok(await kept(store, "s0", lists[0]));
    assert.equal(await kept(store, "s1", lists[1]), false);
    assert.ok(await kept(store, "one-more", extra));
  } finally {
    await store.close();
  }
});

Deno.test("SqliteStore keeps about 8 MiB of messages in memory by default, whatever the number of sessions", async () => {
  const store = new SqliteStore(":memory:");
  try {
    // Each message costs about twice its characters (its request JSON is kept too): 1 MiB apiece.
    const chars = 512 * 1024;
    const count = Math.ceil(HISTORY_CACHE_BYTES / (2 * chars)) + 1;
    const lists = await readSessions(store, Array.from({ length: count }, (_, i) => `big${i}`), chars);
    assert.equal(await kept(store, "big0", lists[0]), false);
    assert.ok(await kept(store, `big${count - 1}`, lists[count - 1]));
  } finally {
    await store.close();
  }
});

Deno.test("SqliteStore with cacheBytes keeps no session that alone passes it", async () => {
  const store = new SqliteStore(":memory:", { cacheBytes: 6000 });
  try {
    const [first, second] = await readSessions(store, ["first", "second"], 1000);
    assert.ok(await kept(store, "first", first));
    assert.ok(await kept(store, "second", second));
    // A third session of the same size passes 6000 bytes: the least recently used, "first", leaves.
    await readSessions(store, ["third"], 1000);
    assert.equal(await kept(store, "first", first), false);
    // A message of 3000 characters alone passes the bound: it is read from the database every time.
    const [alone] = await readSessions(store, ["alone"], 3000);
    assert.equal(await kept(store, "alone", alone), false);
    assert.throws(() => new SqliteStore(":memory:", { cacheSessions: -1 }), RangeError);
  } finally {
    await store.close();
  }
});

Deno.test("SqliteStore frees the bytes of the messages compaction cut from a session it keeps", async () => {
  const store = new SqliteStore(":memory:", { cacheBytes: 10_500 });
  try {
    // About 5.0 and 4.6 kB.
    await readSessions(store, ["a", "b"], 2000);
    await store.append(keyOf("a"), [msg("a:1", "user", "short")]);
    await store.messages(keyOf("a"));
    await store.applyCompaction(keyOf("a"), "{}", ["a:0"], 1);
    const a = await store.messages(keyOf("a"));
    const b = await store.messages(keyOf("b"));
    // Another 4.6 kB fits only because the cut message no longer counts.
    await readSessions(store, ["c"], 2000);
    assert.ok(await kept(store, "a", a));
    assert.ok(await kept(store, "b", b));
  } finally {
    await store.close();
  }
});

Deno.test("SqliteStore keeps a session's own appends in memory within the bound, the oldest session leaving", async () => {
  const store = new SqliteStore(":memory:", { cacheBytes: 10_500 });
  try {
    // About 5.0 and 4.6 kB, both kept.
    const [a] = await readSessions(store, ["a", "b"], 2000);
    // b's own append joins its kept list at once, so that list is the newest: past the bound, a leaves.
    await store.append(keyOf("b"), [msg("b:1", "assistant", "y".repeat(1000))]);
    assert.equal(await kept(store, "a", a), false);
    const b = await store.messages(keyOf("b"));
    assert.deepEqual(b.map((m) => m.id), ["b:0", "b:1"]);
    assert.ok(await kept(store, "b", b));
  } finally {
    await store.close();
  }
});
