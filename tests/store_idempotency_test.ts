/**
 * The idempotency keys of the store, on SQLite and PostgreSQL: a key's first claim is the request's, a repeat
 * of the same body finds it running or done with its response, another body a mismatch; keys are per user;
 * of concurrent claims only one wins; a claim counts as absent after a day (a running one after its bound),
 * and the retention pass deletes those past their day.
 */
import assert from "node:assert/strict";
import { SessionError } from "../src/errors.ts";
import { retentionOf } from "../src/store/open.ts";
import {
  IDEMPOTENCY_KEEP_MS,
  IDEMPOTENCY_RUNNING_MS,
  type RequestClaim,
  type SessionStore,
  type StoredResponse,
} from "../src/store/store.ts";
import { FakeClock } from "./_fake_clock.ts";
import { type StoreDatabase, storeTest } from "./_store_backends.ts";

const START = Date.parse("2026-01-01T00:00:00.000Z");
const ALICE = { userId: "alice", key: "k1" };
const BOB = { userId: "bob", key: "k1" };
const HASH = "a".repeat(64);
const OTHER = "b".repeat(64);
const ANSWER: StoredResponse = {
  status: 200,
  contentType: "application/json",
  body: '{"choices":[{"message":{"content":"ünïcode \\u0000 ok"}}]}',
};

/** The claim of `key` made at `at` (the store's clock then), as `claimRequest` gives it to its holder. */
function held(key: { userId: string; key: string }, at = START) {
  return { ...key, claimedAt: at };
}

/** A store on `db` whose clock reads `clock.now` (moved by the test). */
function openAt(db: StoreDatabase, clock: { now: number }): Promise<SessionStore> {
  return db.open({ now: () => new Date(clock.now) });
}

storeTest(
  "$Store claimRequest() gives a free key to its request; a repeat finds it running, then done with its response",
  async (db) => {
    const clock = { now: START };
    const store = await openAt(db, clock);
    try {
      assert.deepEqual(await store.claimRequest(ALICE, HASH), { state: "new", held: held(ALICE) });
      assert.deepEqual(await store.claimRequest(ALICE, HASH), { state: "running" });
      assert.equal(await store.finishRequest(held(ALICE), ANSWER), true);
      clock.now += 60_000;
      assert.deepEqual(await store.claimRequest(ALICE, HASH), { state: "done", response: ANSWER });
      assert.equal(
        await store.finishRequest(held(ALICE), ANSWER),
        false,
        "done once: nothing runs to finish",
      );
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store claimRequest() answers mismatch for another body of a held key, running or done",
  async (db) => {
    const store = await openAt(db, { now: START });
    try {
      await store.claimRequest(ALICE, HASH);
      assert.deepEqual(await store.claimRequest(ALICE, OTHER), { state: "mismatch" });
      await store.finishRequest(held(ALICE), ANSWER);
      assert.deepEqual(await store.claimRequest(ALICE, OTHER), { state: "mismatch" });
      assert.deepEqual(await store.claimRequest(ALICE, HASH), { state: "done", response: ANSWER });
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store keeps idempotency keys per user: another user's claim of the same key is its own",
  async (db) => {
    const store = await openAt(db, { now: START });
    try {
      await store.claimRequest(ALICE, HASH);
      await store.finishRequest(held(ALICE), ANSWER);
      assert.deepEqual(await store.claimRequest(BOB, OTHER), { state: "new", held: held(BOB) });
      assert.deepEqual(await store.claimRequest(BOB, OTHER), { state: "running" });
      assert.equal(await store.releaseRequest(held(BOB)), true);
      assert.deepEqual(await store.claimRequest(ALICE, HASH), { state: "done", response: ANSWER });
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store of concurrent claims of one key, exactly one is new", async (db, backend) => {
  const [one, two] = [await openAt(db, { now: START }), await openAt(db, { now: START })];
  // PostgreSQL: two pools, as two replicas. SQLite: one connection, as its process has (a second connection
  // of the same thread would block it while waiting for the lock; another process's waits on the file's lock).
  const stores = backend.name === "PostgresStore" ? [one, two] : [one];
  try {
    for (const key of ["c1", "c2", "c3"]) {
      const claims = await Promise.all(
        Array.from(
          { length: 8 },
          (_, i) => stores[i % stores.length].claimRequest({ userId: "alice", key }, HASH),
        ),
      );
      const states = claims.map((claim: RequestClaim) => claim.state).sort();
      assert.deepEqual(states, ["new", ...Array(7).fill("running")], `key ${key}: ${states}`);
    }
  } finally {
    await one.close();
    await two.close();
  }
});

storeTest(
  "$Store counts a claim older than 24 h as absent: the next claim of any body is new and the old response gone",
  async (db) => {
    const clock = { now: START };
    const store = await openAt(db, clock);
    try {
      await store.claimRequest(ALICE, HASH);
      await store.finishRequest(held(ALICE), ANSWER);
      clock.now = START + IDEMPOTENCY_KEEP_MS - 1;
      assert.deepEqual(await store.claimRequest(ALICE, HASH), { state: "done", response: ANSWER });
      clock.now = START + IDEMPOTENCY_KEEP_MS;
      assert.deepEqual(await store.claimRequest(ALICE, OTHER), {
        state: "new",
        held: held(ALICE, clock.now),
      });
      assert.deepEqual(
        await store.claimRequest(ALICE, OTHER),
        { state: "running" },
        "the new claim holds it",
      );
      assert.deepEqual(await store.claimRequest(ALICE, HASH), { state: "mismatch" });
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store takes over a running claim past its bound (its process died): 15 min by default, or runningMs",
  async (db) => {
    const clock = { now: START };
    const store = await openAt(db, clock);
    try {
      await store.claimRequest(ALICE, HASH);
      clock.now = START + IDEMPOTENCY_RUNNING_MS - 1;
      assert.deepEqual(await store.claimRequest(ALICE, HASH), { state: "running" });
      clock.now = START + IDEMPOTENCY_RUNNING_MS;
      assert.deepEqual(await store.claimRequest(ALICE, HASH), { state: "new", held: held(ALICE, clock.now) });
      clock.now += 5_000;
      assert.deepEqual(await store.claimRequest(ALICE, HASH, { runningMs: 10_000 }), { state: "running" });
      clock.now += 5_000;
      assert.deepEqual(await store.claimRequest(ALICE, HASH, { runningMs: 10_000 }), {
        state: "new",
        held: held(ALICE, clock.now),
      });
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store a claim taken over as dead can neither finish nor free the key: the later claim's result is kept",
  async (db) => {
    const clock = { now: START };
    const store = await openAt(db, clock);
    try {
      await store.claimRequest(ALICE, HASH);
      clock.now = START + IDEMPOTENCY_RUNNING_MS;
      const later = await store.claimRequest(ALICE, HASH);
      assert.deepEqual(later, { state: "new", held: held(ALICE, clock.now) });
      // The first request was alive after all and ends now: what it says changes nothing.
      assert.equal(await store.releaseRequest(held(ALICE)), false);
      assert.equal(await store.finishRequest(held(ALICE), { ...ANSWER, body: "the first's" }), false);
      assert.deepEqual(
        await store.claimRequest(ALICE, HASH),
        { state: "running" },
        "the later claim holds it",
      );
      assert.equal(await store.finishRequest(held(ALICE, clock.now), ANSWER), true);
      assert.deepEqual(await store.claimRequest(ALICE, HASH), { state: "done", response: ANSWER });
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store releaseRequest() frees the key for the next claim; a released claim cannot be finished",
  async (db) => {
    const store = await openAt(db, { now: START });
    try {
      await store.claimRequest(ALICE, HASH);
      assert.equal(await store.releaseRequest(held(ALICE)), true);
      assert.equal(await store.finishRequest(held(ALICE), ANSWER), false);
      assert.equal(await store.releaseRequest(held(ALICE)), false, "nothing left to release");
      assert.deepEqual(await store.claimRequest(ALICE, OTHER), { state: "new", held: held(ALICE) });
    } finally {
      await store.close();
    }
  },
);

storeTest("$Store refuses a malformed idempotency key without naming it, and an empty hash", async (db) => {
  const store = await openAt(db, { now: START });
  try {
    for (const key of ["", "has space", "x".repeat(256), "ключ"]) {
      await assert.rejects(store.claimRequest({ userId: "alice", key }, HASH), (error: unknown) => {
        assert.ok(error instanceof SessionError);
        assert.equal(error.reason, "invalid_id");
        assert.ok(key === "" || !error.message.includes(key), error.message);
        return true;
      });
    }
    await assert.rejects(store.claimRequest({ userId: "a b", key: "k" }, HASH), SessionError);
    await assert.rejects(store.claimRequest(ALICE, ""), TypeError);
    const longest = { userId: "alice", key: "~".repeat(255) };
    assert.deepEqual(await store.claimRequest(longest, HASH), { state: "new", held: held(longest) });
  } finally {
    await store.close();
  }
});

storeTest(
  "$Store retention deletes the claims of idempotency keys past their day, keeping the newer",
  async (db) => {
    const clock = new FakeClock(START);
    const store = await db.open({ now: () => new Date(clock.now()) });
    try {
      for (const key of ["old1", "old2", "old3"]) await store.claimRequest({ userId: "alice", key }, HASH);
      await clock.advance(IDEMPOTENCY_KEEP_MS - 1000);
      await store.claimRequest({ userId: "bob", key: "recent" }, HASH);
      await clock.advance(1000);
      const retention = retentionOf(store, { batch: 2, clock })!;
      assert.deepEqual(await retention.prune(), { traceEvents: 0, sessions: 0, requests: 3 });
      assert.deepEqual(await retention.prune(), { traceEvents: 0, sessions: 0, requests: 0 });
      assert.deepEqual(await store.claimRequest({ userId: "bob", key: "recent" }, HASH), {
        state: "running",
      });
    } finally {
      await store.close();
    }
  },
);
