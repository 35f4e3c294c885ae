import assert from "node:assert/strict";
import { SharedTrace, type TraceTableLike } from "../src/trace/shared_trace.ts";

/** A table that stores what it is given, failing while `down` is set. */
function fakeTable(): TraceTableLike & { down: boolean; rows: Record<string, unknown>[] } {
  const rows: Record<string, unknown>[] = [];
  const table = {
    down: false as boolean,
    rows,
    write(events: readonly Record<string, unknown>[]) {
      if (table.down) return Promise.reject(new Error("connection refused"));
      return new Promise<void>((resolve) => setTimeout(() => (rows.push(...events), resolve()), 1));
    },
    page() {
      return Promise.resolve({ events: [...rows], nextCursor: null });
    },
  };
  return table;
}

Deno.test("SharedTrace ships events in order and a page sees every event written before it", async () => {
  const table = fakeTable();
  const shared = new SharedTrace(table);
  for (let i = 0; i < 1200; i++) shared.add({ i });
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
    shared.add({ i });
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
