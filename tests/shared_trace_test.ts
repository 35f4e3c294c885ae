import assert from "node:assert/strict";
import { SharedTrace, type TraceRow, type TraceTable } from "../src/trace/shared_trace.ts";

/** An event of session s numbered `i`. */
const ev = (i: number) => ({ ts: "2026-01-01T00:00:00.000Z", user_id: "u", session_id: "s", run_id: "r", i });
import { FakeClock } from "./_fake_clock.ts";

/** A table that stores what it is given, failing while `down` is set. */
function fakeTable(): TraceTable & { down: boolean; rows: Record<string, unknown>[]; writes: number } {
  const rows: Record<string, unknown>[] = [];
  const table = {
    down: false as boolean,
    rows,
    writes: 0,
    write(written: readonly TraceRow[]) {
      const events = written.map((row) => JSON.parse(row.line));
      table.writes++;
      if (table.down) return Promise.reject(new Error("connection refused"));
      return new Promise<void>((resolve) => setTimeout(() => (rows.push(...events), resolve()), 1));
    },
    prune(keep: number) {
      rows.splice(0, Math.max(0, rows.length - keep));
      return Promise.resolve();
    },
    page() {
      return Promise.resolve({ events: [...rows], nextCursor: null, endCursor: rows.length + 1 });
    },
    latest() {
      return Promise.resolve(rows.at(-1) ?? null);
    },
    // Not SharedTrace's: retention's (tests/retention_test.ts).
    pruneOlder() {
      return Promise.reject(new Error("not used"));
    },
  };
  return table;
}

Deno.test("SharedTrace ships events in order and a page sees every event written before it", async () => {
  const table = fakeTable();
  const shared = new SharedTrace(table);
  for (let i = 0; i < 1200; i++) shared.add(ev(i));
  const page = await shared.page({
    userId: "u",
    sessionId: "s",
    since: "",
    runId: null,
    limit: 1,
    cursor: null,
  });
  assert.deepEqual(page.events.map((e) => e.i), Array.from({ length: 1200 }, (_, i) => i));
  await shared.close();
});

Deno.test("SharedTrace keeps events while the table fails, warns once, and ships them in order when it answers", async () => {
  const table = fakeTable();
  const lines: string[] = [];
  const shared = new SharedTrace(table, { warn: (line) => lines.push(line), maxQueued: 3 });
  table.down = true;
  for (let i = 0; i < 5; i++) {
    shared.add(ev(i));
    await shared.flushed();
  }
  assert.equal(table.rows.length, 0);
  assert.equal(lines.length, 1);
  assert.match(lines[0], /cannot ship trace events to the database \(connection refused\)/);
  table.down = false;
  await shared.close();
  assert.deepEqual(
    table.rows.map((e) => e.i),
    [0, 1, 2],
    "the oldest kept, the newest dropped past the bound",
  );
  assert.match(lines[1], /trace events reach the database again \(2 events were dropped meanwhile\)/);
});

Deno.test("SharedTrace with delayMs ships the events of the window in one write, or at once for a page", async () => {
  const clock = new FakeClock();
  const table = fakeTable();
  const shared = new SharedTrace(table, { delayMs: 50, clock });
  for (let i = 0; i < 3; i++) shared.add(ev(i));
  await clock.advance(49);
  assert.equal(table.writes, 0, "nothing shipped before the window ends");
  await clock.advance(1);
  assert.equal(clock.pending, 0);
  await shared.flushed();
  assert.deepEqual([table.writes, table.rows.map((e) => e.i)], [1, [0, 1, 2]]);
  shared.add(ev(3));
  const query = { userId: "u", sessionId: "s", since: "", runId: null, limit: 10, cursor: null };
  assert.equal((await shared.page(query)).events.length, 4, "a page ships the queued event first");
  assert.equal(table.writes, 2);
  await shared.close();
});

Deno.test("SharedTrace leaves out an event that names no session, and ships the line it is given", async () => {
  const table = fakeTable();
  const shared = new SharedTrace(table);
  shared.add({ ts: "2026-01-01T00:00:00.000Z", event: "run_start" });
  shared.add({ ...ev(0), ts: "yesterday" });
  shared.add(ev(1), JSON.stringify({ ...ev(1), as: "written" }));
  await shared.close();
  assert.deepEqual(table.rows, [{ ...ev(1), as: "written" }]);
});

Deno.test("SharedTrace keeps the table at its newest maxEvents, pruning after every maxEvents shipped", async () => {
  const table = fakeTable();
  const shared = new SharedTrace(table, { maxEvents: 100 });
  for (let i = 0; i < 450; i++) {
    shared.add(ev(i));
    if (i % 50 === 49) await shared.flushed();
  }
  await shared.close();
  // Pruned at 100, 200, 300 and 400 shipped: the 50 since then wait for the next prune.
  assert.deepEqual(table.rows.map((e) => e.i), Array.from({ length: 150 }, (_, n) => 300 + n));
});
