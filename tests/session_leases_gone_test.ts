/**
 * SessionLeases and a holder whose process is gone: one of this host, gone, loses its lease at once; one that
 * runs, or one of another host, keeps it until it is released or expires. Who is gone is the test's say; the
 * store's clock stands still unless the test moves it, so only a take from the holder can end a wait early.
 */
import assert from "node:assert/strict";
import { SessionLeases } from "../src/session/leases.ts";
import type { LeaseStore } from "../src/store/store.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { keyOf, leaseStoreWith } from "./_harness.ts";
import { until } from "./_http_harness.ts";

const fast = { minPollMs: 5, maxPollMs: 20 };
const DEAD = "box:1:1700000000000:aaaaaaaa";

/** A store on a clock the test moves, counting the takes tried. */
function clockedStore() {
  const clock = { ms: Date.parse("2026-01-01T00:00:00Z") };
  const store = new SqliteStore(":memory:", { now: () => new Date(clock.ms) });
  const tries = { count: 0 };
  const counted = leaseStoreWith(store, {
    acquireLease: (key, owner, ttl, options) => (tries.count++, store.acquireLease(key, owner, ttl, options)),
  });
  return { store, clock, tries, counted };
}

Deno.test("SessionLeases.hold() takes at once the lease of a gone process of its host", async () => {
  const { store, counted } = clockedStore();
  try {
    await store.acquireLease(keyOf("s"), `${DEAD}:1`, 60_000);
    const asked: string[] = [];
    const leases = new SessionLeases(counted, {
      owner: "box:2:1700000000001:bbbbbbbb",
      processGone: (owner) => (asked.push(owner), owner === DEAD),
      ...fast,
    });
    // The store's clock stands still: without the take from the gone holder this would wait until stopped.
    const stop = new AbortController();
    const timer = setTimeout(() => stop.abort(new Error("still waiting for the gone holder's lease")), 5000);
    const answer = await leases.hold(keyOf("s"), () => Promise.resolve("ran"), { signal: stop.signal })
      .finally(() => clearTimeout(timer));
    assert.equal(answer, "ran");
    assert.deepEqual(asked, [DEAD], "asked about the holder's process, without its take number");
    assert.equal(await store.renewLease(keyOf("s"), `${DEAD}:1`, 60_000), false, "the gone holder lost it");
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() waits for a lease whose holder of its host still runs", async () => {
  const { store, tries, counted } = clockedStore();
  try {
    await store.acquireLease(keyOf("s"), `${DEAD}:1`, 60_000);
    const leases = new SessionLeases(counted, {
      owner: "box:2:1700000000001:bbbbbbbb",
      processGone: () => false,
      ...fast,
    });
    let ran = false;
    const waiting = leases.hold(keyOf("s"), () => Promise.resolve(void (ran = true)));
    await until(() => tries.count >= 4, "four tries");
    assert.equal(ran, false, "the running holder keeps its lease");
    await store.releaseLease(keyOf("s"), `${DEAD}:1`);
    await waiting;
    assert.equal(ran, true);
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() waits until it expires for a lease held on another host", async () => {
  const { store, clock, tries, counted } = clockedStore();
  try {
    await store.acquireLease(keyOf("s"), "elsewhere:1:1700000000000:aaaaaaaa:1", 60_000);
    const asked: string[] = [];
    const leases = new SessionLeases(counted, {
      owner: "box:2:1700000000001:bbbbbbbb",
      processGone: (owner) => (asked.push(owner), true),
      ...fast,
    });
    let ran = false;
    const waiting = leases.hold(keyOf("s"), () => Promise.resolve(void (ran = true)));
    await until(() => tries.count >= 4, "four tries");
    assert.equal(ran, false);
    assert.deepEqual(asked, [], "another host's processes are not this host's to judge");
    clock.ms += 60_000;
    await waiting;
    assert.equal(ran, true, "taken once expired");
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() judges nobody when it does not know its own host", async () => {
  const { store, clock, tries, counted } = clockedStore();
  try {
    await store.acquireLease(keyOf("s"), "host:1:1700000000000:aaaaaaaa:1", 60_000);
    const asked: string[] = [];
    const leases = new SessionLeases(counted, {
      owner: "host:2:1700000000001:bbbbbbbb",
      processGone: (owner) => (asked.push(owner), true),
      ...fast,
    });
    const waiting = leases.hold(keyOf("s"), () => Promise.resolve());
    await until(() => tries.count >= 4, "four tries");
    assert.deepEqual(asked, [], "'host' names no host in particular");
    clock.ms += 60_000;
    await waiting;
  } finally {
    await store.close();
  }
});

Deno.test("SessionLeases.hold() waits for a gone holder's lease once another process took it first", async () => {
  const { store, tries, counted } = clockedStore();
  try {
    await store.acquireLease(keyOf("s"), `${DEAD}:1`, 60_000);
    // Between this process's busy take and its take from the gone holder, another restarted process wins.
    const racing: LeaseStore = {
      ...counted,
      acquireLease: async (key, owner, ttl, options) => {
        if (options?.from !== undefined) {
          await store.acquireLease(key, "box:3:1700000000002:cccccccc:1", 60_000, options);
        }
        return counted.acquireLease(key, owner, ttl, options);
      },
    };
    const leases = new SessionLeases(racing, {
      owner: "box:2:1700000000001:bbbbbbbb",
      processGone: (owner) => owner === DEAD,
      ...fast,
    });
    let ran = false;
    const waiting = leases.hold(keyOf("s"), () => Promise.resolve(void (ran = true)));
    await until(() => tries.count >= 4, "four tries");
    assert.equal(ran, false, "the winner's lease is not displaced");
    await store.releaseLease(keyOf("s"), "box:3:1700000000002:cccccccc:1");
    await waiting;
    assert.equal(ran, true);
  } finally {
    await store.close();
  }
});
