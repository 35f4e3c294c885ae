/**
 * Retention on each backend, on an injected clock: trace events older than the trace retention go, the recent
 * stay; a session idle past the session retention goes with everything of it, a recent one and one whose lease
 * is held stay; two pruners on two connections at once leave the same result and do not fail. Then the
 * background passes on a fake clock: when they run, what stops them, how a failure is reported.
 */
import assert from "node:assert/strict";
import { retentionOf } from "../src/store/open.ts";
import { Retention, type RetentionPass, type RetentionTarget } from "../src/store/retention.ts";
import type { PendingStep, SessionKey, SessionStore } from "../src/store/store.ts";
import { SqlStore } from "../src/store/sql_store.ts";
import type { TraceRow, TraceTable } from "../src/trace/shared_trace.ts";
import { traceTableOf } from "../src/store/open.ts";
import { FakeClock } from "./_fake_clock.ts";
import { keyOf, ROOT, storedMessage } from "./_harness.ts";
import { type StoreDatabase, storeTest } from "./_store_backends.ts";

const DAY = 24 * 60 * 60 * 1000;
const START = Date.parse("2026-01-01T00:00:00.000Z");

/** A trace row of `key`'s run `run`, written at `at` (ms), numbered `i`. */
function row(key: SessionKey, at: number, i: number, run = "r"): TraceRow {
  const ts = new Date(at).toISOString();
  const event = { ts, user_id: key.userId, session_id: key.sessionId, run_id: run, event: "run_start", i };
  return { user_id: key.userId, session_id: key.sessionId, run_id: run, ts, line: JSON.stringify(event) };
}

/** The numbers (`i`) of every event the table holds for `key`, in row order. */
async function eventsOf(trace: TraceTable, key: SessionKey): Promise<number[]> {
  const page = await trace.page({
    ...key,
    since: "1970-01-01T00:00:00.000Z",
    runId: null,
    limit: 1000,
    cursor: null,
  });
  return page.events.map((event) => event.i as number);
}

/** A store on `db` whose every timestamp is the fake clock's. */
function openAt(db: StoreDatabase, clock: FakeClock): Promise<SessionStore> {
  return db.open({ now: () => new Date(clock.now()) });
}

function pendingStep(runId: string): PendingStep {
  return {
    runId,
    turn: 1,
    step: 0,
    seq: 2,
    content: null,
    toolCalls: [{ id: "c1", name: "calculator", arguments: '{"expression":"1+1"}' }],
    asked: ["c1"],
    createdAt: "2026-01-01T00:00:00.000Z",
  };
}

/** Gives `key` a session with two messages, a todo, a pending step and `events` trace events at the clock's time. */
async function seedSession(store: SessionStore, clock: FakeClock, key: SessionKey, events: number) {
  await store.getOrCreate(key);
  await store.append(key, [
    storedMessage(`${key.sessionId}-q`, "user", "what is 1+1?"),
    storedMessage(`${key.sessionId}-a`, "assistant", "2"),
  ]);
  await store.addTodo(key, "milk");
  await store.savePending(key, pendingStep(`run-${key.sessionId}`));
  await store.saveResponse(key, `resp_${key.sessionId}`, "{}");
  const rows = Array.from({ length: events }, (_, i) => row(key, clock.now(), i));
  await traceTableOf(store)!.write(rows);
}

/** Everything the store holds of `key`, counted. */
async function holdings(store: SessionStore, key: SessionKey) {
  return {
    session: (await store.get(key)) !== null,
    messages: (await store.messages(key)).length,
    todos: (await store.listTodos(key)).length,
    pending: (await store.pendingStep(key)) !== null,
    events: (await eventsOf(traceTableOf(store)!, key)).length,
    response: (await store.response(key.userId, `resp_${key.sessionId}`)) !== null,
  };
}

storeTest(
  "$Store retention deletes trace events older than the trace retention, in batches, and keeps the recent ones",
  async (db) => {
    const clock = new FakeClock(START);
    const store = await openAt(db, clock);
    try {
      const trace = traceTableOf(store)!;
      const [a, b] = [keyOf("a"), keyOf("b")];
      // Old and recent interleaved across two sessions, and one recent event before an old one (shipped late).
      const rows = [
        ...Array.from({ length: 11 }, (_, i) => row(i % 2 === 0 ? a : b, START - 40 * DAY + i, i)),
        row(a, START - DAY, 11),
        row(b, START - 31 * DAY, 12),
        ...Array.from({ length: 5 }, (_, i) => row(i % 2 === 0 ? a : b, START - 29 * DAY + i, 13 + i)),
      ];
      await trace.write(rows);
      const retention = retentionOf(store, { traceDays: 30, batch: 4, clock })!;
      const pass = await retention.prune();
      assert.deepEqual(pass, { traceEvents: 12, sessions: 0, requests: 0 });
      assert.deepEqual(await eventsOf(trace, a), [11, 13, 15, 17]);
      assert.deepEqual(await eventsOf(trace, b), [14, 16]);
      assert.deepEqual(
        await retention.prune(),
        { traceEvents: 0, sessions: 0, requests: 0 },
        "nothing more is old",
      );
      // A day later the events of 29 days ago are 30 days and a bit old.
      await clock.advance(DAY + 10);
      assert.deepEqual(await retention.prune(), { traceEvents: 5, sessions: 0, requests: 0 });
      assert.deepEqual(await eventsOf(trace, a), [11]);
      assert.deepEqual(await eventsOf(trace, b), []);
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store retention deletes a session idle past the session retention with its messages, todos, pending step, kept responses, lease and trace events; a recent one and a leased one stay",
  async (db) => {
    const clock = new FakeClock(START);
    const store = await openAt(db, clock);
    const other = await openAt(db, clock);
    try {
      const [idle, leased, recent] = [keyOf("idle"), keyOf("leased"), keyOf("recent")];
      await seedSession(store, clock, idle, 3);
      await seedSession(store, clock, leased, 2);
      await clock.advance(8 * DAY);
      await seedSession(store, clock, recent, 2);
      // A turn of another process runs on `leased`.
      assert.deepEqual(await other.acquireLease(leased, "box:1:100:aaaaaaaa:1", 60_000), { taken: true });
      const retention = retentionOf(store, { sessionDays: 7, owner: "box:2:200:bbbbbbbb:0", clock })!;

      assert.deepEqual(await retention.prune(), { traceEvents: 0, sessions: 1, requests: 0 });
      const gone = { session: false, messages: 0, todos: 0, pending: false, events: 0, response: false };
      const whole = { session: true, messages: 2, todos: 1, pending: true, events: 2, response: true };
      assert.deepEqual(await holdings(other, idle), gone);
      assert.deepEqual(await holdings(other, leased), whole);
      assert.deepEqual(await holdings(other, recent), whole);
      // The pruner's lease on the deleted session went with it: another owner takes it at once.
      assert.equal(await other.releaseLease(idle, "box:2:200:bbbbbbbb:0"), false);
      assert.deepEqual(await other.acquireLease(idle, "box:3:300:cccccccc:1", 60_000), { taken: true });
      await other.releaseLease(idle, "box:3:300:cccccccc:1");

      // Once its turn has ended, the leased session goes too; the recent one only when it is idle long enough.
      await other.releaseLease(leased, "box:1:100:aaaaaaaa:1");
      assert.deepEqual(await retention.prune(), { traceEvents: 0, sessions: 1, requests: 0 });
      assert.deepEqual(await holdings(other, leased), gone);
      await clock.advance(7 * DAY + 1);
      assert.deepEqual(await retention.prune(), { traceEvents: 0, sessions: 1, requests: 0 });
      assert.deepEqual(await holdings(other, recent), gone);
    } finally {
      await store.close();
      await other.close();
    }
  },
);

storeTest(
  "$Store.deleteIdleSession() leaves a session written to after it was listed, and one whose lease another holds",
  async (db) => {
    const clock = new FakeClock(START);
    const store = await openAt(db, clock);
    try {
      assert.ok(store instanceof SqlStore);
      const [late, held] = [keyOf("late"), keyOf("held")];
      await seedSession(store, clock, late, 1);
      await seedSession(store, clock, held, 1);
      await clock.advance(2 * DAY);
      const before = new Date(clock.now() - DAY).toISOString();
      const listed = (await store.idleSessions(before, 10)).map((s) => s.id);
      assert.deepEqual(listed, ["held", "late"]);
      // A turn writes to `late` between the listing and the delete; a turn of this process holds `held`.
      await store.append(late, [storedMessage("late-q2", "user", "again")]);
      await store.acquireLease(held, "box:1:100:aaaaaaaa:7", 60_000);
      assert.equal(await store.deleteIdleSession(late, before, "box:1:100:aaaaaaaa:0", 30_000), false);
      assert.equal(await store.deleteIdleSession(held, before, "box:1:100:aaaaaaaa:0", 30_000), false);
      assert.equal((await store.messages(late)).length, 3);
      assert.equal((await store.messages(held)).length, 2);
      // The listing leaves out the leased one, and the refused delete left no lease of the pruner on `late`.
      assert.deepEqual((await store.idleSessions(before, 10)).map((s) => s.id), []);
      assert.deepEqual(await store.acquireLease(late, "box:1:100:aaaaaaaa:8", 60_000), { taken: true });
    } finally {
      await store.close();
    }
  },
);

storeTest(
  "$Store.idleSessions() pages by (updated_at, user, id) past sessions of the same time",
  async (db) => {
    const clock = new FakeClock(START);
    const store = await openAt(db, clock);
    try {
      assert.ok(store instanceof SqlStore);
      for (const [user, id] of [["u", "b"], ["u", "a"], ["v", "a"], ["t", "z"]]) {
        await store.getOrCreate(
          keyOf(id, user),
        );
      }
      await clock.advance(DAY);
      await store.getOrCreate(keyOf("young"));
      const before = new Date(clock.now()).toISOString();
      const first = await store.idleSessions(before, 3);
      const second = await store.idleSessions(before, 3, first[2]);
      const names = (page: typeof first) => page.map((s) => `${s.userId}/${s.id}`);
      assert.deepEqual(names(first), ["t/z", "u/a", "u/b"]);
      assert.deepEqual(names(second), ["v/a"]);
      await assert.rejects(store.idleSessions(before, 0), RangeError);
    } finally {
      await store.close();
    }
  },
);

/** Runs `count` pruners of `tests/fixtures/retention_pruner.ts` on the SQLite file at once; resolves to their passes. */
async function prunerProcesses(path: string, now: number, owners: string[]): Promise<RetentionPass[]> {
  const children = owners.map((owner) =>
    new Deno.Command("deno", {
      args: [
        "run",
        "--no-prompt",
        "--allow-read",
        "--allow-write",
        "tests/fixtures/retention_pruner.ts",
        path,
        String(now),
        owner,
      ],
      cwd: ROOT,
      stdin: "piped",
      stdout: "piped",
      stderr: "piped",
    }).spawn()
  );
  const outputs = children.map((child) => child.stdout.pipeThrough(new TextDecoderStream()).getReader());
  const texts = owners.map(() => "");
  // Each has opened the file once it says so; closing their stdin starts them together.
  for (const [i, reader] of outputs.entries()) {
    while (!texts[i].includes("ready\n")) {
      const { value, done } = await reader.read();
      if (done) break;
      texts[i] += value;
    }
  }
  for (const child of children) await child.stdin.close();
  return await Promise.all(children.map(async (child, i) => {
    for (;;) {
      const { value, done } = await outputs[i].read();
      if (done) break;
      texts[i] += value;
    }
    const { code } = await child.status;
    const stderr = await new Response(child.stderr).text();
    assert.equal(code, 0, stderr);
    return JSON.parse(texts[i].slice(texts[i].indexOf("ready\n") + 6));
  }));
}

storeTest(
  "$Store retention: two pruners on two connections at once delete each row once, leave the same result as one, and neither fails",
  async (db, backend) => {
    const clock = new FakeClock(START);
    const seeding = await openAt(db, clock);
    const old = keyOf("old-events");
    const recent = keyOf("recent");
    const idle = Array.from({ length: 30 }, (_, i) => keyOf(`idle-${String(i).padStart(2, "0")}`));
    try {
      // Written in time order, as events are shipped: the old ones first.
      const oldRows = Array.from({ length: 400 }, (_, i) => row(old, START - 40 * DAY + i, i));
      await traceTableOf(seeding)!.write(oldRows);
      for (const key of idle) await seedSession(seeding, clock, key, 2);
      await clock.advance(10 * DAY);
      await seedSession(seeding, clock, recent, 2);
      await traceTableOf(seeding)!.write(
        Array.from({ length: 6 }, (_, i) => row(old, clock.now() + i, 400 + i)),
      );
    } finally {
      await seeding.close();
    }

    // One process holds one SQLite connection (its statements block the thread while they wait for the file's
    // lock), so SQLite's pruners are two processes; PostgreSQL's are two pools of this one.
    const owners = ["box:1:100:aaaaaaaa:0", "box:2:200:bbbbbbbb:0"];
    let passes: RetentionPass[];
    if (backend.name === "SqliteStore") passes = await prunerProcesses(db.location, clock.now(), owners);
    else {
      const stores = [await openAt(db, clock), await openAt(db, clock)];
      try {
        const options = { traceDays: 30, sessionDays: 5, batch: 5, clock };
        passes = await Promise.all(
          stores.map((store, i) => retentionOf(store, { ...options, owner: owners[i] })!.prune()),
        );
      } finally {
        for (const store of stores) await store.close();
      }
    }

    assert.equal(passes[0].traceEvents + passes[1].traceEvents, 400, JSON.stringify(passes));
    assert.equal(passes[0].sessions + passes[1].sessions, 30, JSON.stringify(passes));
    const store = await openAt(db, clock);
    try {
      assert.deepEqual(await eventsOf(traceTableOf(store)!, old), [400, 401, 402, 403, 404, 405]);
      const gone = { session: false, messages: 0, todos: 0, pending: false, events: 0, response: false };
      for (const key of idle) assert.deepEqual(await holdings(store, key), gone, key.sessionId);
      const whole = { session: true, messages: 2, todos: 1, pending: true, events: 2, response: true };
      assert.deepEqual(await holdings(store, recent), whole);
      for (const key of [...idle, recent]) {
        assert.deepEqual(
          await store.acquireLease(key, "box:3:300:cccccccc:1", 1000),
          { taken: true },
          "no lease left",
        );
      }
    } finally {
      await store.close();
    }
  },
);

/** A trace target that records each batch asked for and answers from `answers` (then: nothing left). */
function fakeTarget(answers: (() => Promise<{ last: number | null; deleted: number }>)[] = []) {
  const calls: { before: string; after: number; limit: number }[] = [];
  const target: RetentionTarget = {
    trace: {
      pruneOlder(before, after, limit) {
        calls.push({ before, after, limit });
        return answers.shift()?.() ?? Promise.resolve({ last: null, deleted: 0 });
      },
    },
    sessions: null,
  };
  return { target, calls };
}

Deno.test("Retention.start() runs a pass after the first delay, then every interval, until close()", async () => {
  const clock = new FakeClock(START);
  const { target, calls } = fakeTarget();
  const retention = new Retention(target, {
    traceDays: 2,
    firstDelayMs: 60_000,
    intervalMs: 3_600_000,
    clock,
    random: () => 0.5,
  });
  retention.start();
  retention.start(); // a second start changes nothing
  await clock.advance(59_999);
  assert.equal(calls.length, 0);
  await clock.advance(1);
  assert.deepEqual(calls, [{
    before: new Date(START + 60_000 - 2 * DAY).toISOString(),
    after: 0,
    limit: 500,
  }]);
  await clock.advance(3_600_000);
  assert.equal(calls.length, 2);
  await retention.close();
  assert.equal(clock.pending, 0, "no wait is left behind");
  await clock.advance(10 * 3_600_000);
  assert.equal(calls.length, 2);
});

Deno.test("Retention spreads its passes by the jitter it is given: from 0.75 to 1.25 of each wait", async () => {
  const clock = new FakeClock(START);
  const { target, calls } = fakeTarget();
  const retention = new Retention(target, { firstDelayMs: 1000, intervalMs: 4000, clock, random: () => 0 });
  retention.start();
  await clock.advance(750);
  assert.equal(calls.length, 1);
  await clock.advance(3000);
  assert.equal(calls.length, 2);
  await retention.close();
});

Deno.test("Retention.close() during a pass waits for its batch under way and starts no other", async () => {
  const clock = new FakeClock(START);
  let finish!: () => void;
  const slow = () =>
    new Promise<{ last: number; deleted: number }>((resolve) =>
      finish = () => resolve({ last: 5, deleted: 5 })
    );
  const { target, calls } = fakeTarget([slow]);
  const retention = new Retention(target, { firstDelayMs: 1000, clock, random: () => 0.5 });
  retention.start();
  await clock.advance(1000);
  assert.equal(calls.length, 1);
  let closed = false;
  const closing = retention.close().then(() => closed = true);
  await clock.advance(0);
  assert.equal(closed, false, "the batch under way is awaited");
  finish();
  await closing;
  assert.equal(calls.length, 1, "no batch after close, though the last one deleted some");
});

Deno.test("Retention warns once while its passes fail and once when one works again", async () => {
  const clock = new FakeClock(START);
  const fail = () => Promise.reject(new Error("connection refused"));
  const { target, calls } = fakeTarget([fail, fail]);
  const lines: string[] = [];
  const retention = new Retention(target, {
    firstDelayMs: 1000,
    intervalMs: 1000,
    clock,
    random: () => 0.5,
    warn: (line) => lines.push(line),
  });
  retention.start();
  await clock.advance(3000);
  assert.equal(calls.length, 3);
  assert.deepEqual(lines, [
    "warning: cannot delete expired trace events or idle sessions (connection refused); trying again at the next pass",
    "expired trace events and idle sessions are deleted again",
  ]);
  await retention.close();
});

Deno.test("Retention walks the trace table batch by batch and stops at the first batch with nothing old", async () => {
  const { target, calls } = fakeTarget([
    () => Promise.resolve({ last: 10, deleted: 10 }),
    () => Promise.resolve({ last: 20, deleted: 3 }),
    () => Promise.resolve({ last: 30, deleted: 0 }),
    () => Promise.resolve({ last: 40, deleted: 10 }),
  ]);
  const retention = new Retention(target, { batch: 10, clock: new FakeClock(START) });
  assert.deepEqual(await retention.prune(), { traceEvents: 13, sessions: 0, requests: 0 });
  assert.deepEqual(calls.map((c) => c.after), [0, 10, 20]);
  const stopped = new AbortController();
  stopped.abort(new Error("stop"));
  await assert.rejects(retention.prune(stopped.signal), /stop/);
});

Deno.test("Retention takes a span longer than time has run as nothing to delete, and refuses bad options", async () => {
  const { target, calls } = fakeTarget();
  await new Retention(target, { traceDays: 1e12, clock: new FakeClock(START) }).prune();
  assert.equal(calls[0].before, "1970-01-01T00:00:00.000Z");
  for (
    const [options, pattern] of [
      [{ traceDays: 0 }, /traceDays must be a finite number > 0, got 0/],
      [{ sessionDays: -1 }, /sessionDays must be a finite number > 0, got -1/],
      [{ intervalMs: Infinity }, /intervalMs must be a finite number > 0/],
      [{ batch: 1.5 }, /batch must be an integer >= 1, got 1.5/],
    ] as const
  ) {
    assert.throws(
      () => new Retention(target, options),
      (e) => e instanceof RangeError && pattern.test(e.message),
    );
  }
});
