/**
 * Trace files are told apart by inode and birth time: a file system hands a deleted file's inode to the next
 * file it creates, and neither the trace index nor a cursor may take the new file for the old one.
 */
import assert from "node:assert/strict";
import type { RunEvent } from "../src/events.ts";
import { TraceReader } from "../src/trace/reader.ts";
import { JsonlTracer, readTrace } from "../src/trace/trace.ts";
import { tempDir } from "./_harness.ts";

function event(user: string, step: number, text: string, session = "s"): RunEvent {
  return {
    ts: new Date(Date.UTC(2026, 0, 1) + step).toISOString(),
    session_id: session,
    user_id: user,
    run_id: `r-${user}`,
    turn: 1,
    event: "llm_call",
    step,
    data: { text, pad: "p".repeat(40) },
  } as unknown as RunEvent;
}

function exists(path: string): boolean {
  try {
    Deno.statSync(path);
    return true;
  } catch {
    return false;
  }
}

const page = (
  reader: TraceReader,
  userId: string,
  limit = 1000,
  cursor: { file: string; offset: number } | null = null,
) => reader.page({ userId, sessionId: "s", since: "2026-01-01T00:00:00.000Z", runId: null, limit, cursor });

Deno.test("a new trace file that reuses a deleted file's inode is indexed afresh: no other user's event leaks", async () => {
  using dir = tempDir();
  const path = `${dir.path}/trace.jsonl`;
  const tracer = new JsonlTracer(path, { maxBytes: 2000 });
  const reader = new TraceReader(path);
  try {
    let n = 0;
    while (!exists(`${path}.1`)) tracer.write(event("alice", n++, "alice-private"));
    while (!exists(`${path}.5`)) tracer.write(event("bob", n++, "bob-private"));
    const before = await page(reader, "alice");
    assert.ok(before.events.length > 0);
    // Bob writes on, nobody reads, until the newest file has the old .5's inode and size (on file systems that
    // reuse inodes, as ext4 does) or a bound is reached.
    const old = Deno.statSync(`${path}.5`);
    for (let i = 0; i < 3000; i++) {
      const now = Deno.statSync(path);
      if (now.ino === old.ino && now.size >= old.size) break;
      tracer.write(event("bob", n++, "bob-private"));
    }
    const after = await page(reader, "alice");
    assert.deepEqual([...new Set(after.events.map((e) => e.user_id))].filter((u) => u !== "alice"), []);
    assert.ok(after.events.every((e) => (e.data as { text: string }).text === "alice-private"));
  } finally {
    tracer.close();
  }
});

Deno.test("a cursor into a file that rotation deleted starts at the oldest file left, even if its inode is reused", async () => {
  using dir = tempDir();
  const path = `${dir.path}/trace.jsonl`;
  const tracer = new JsonlTracer(path, { maxBytes: 2000 });
  const reader = new TraceReader(path);
  try {
    let n = 0;
    while (!exists(`${path}.5`)) tracer.write(event("alice", n++, "x"));
    const first = await page(reader, "alice", 3);
    assert.ok(first.nextCursor !== null);
    // One more rotation deletes the file the cursor points into.
    const oldest = Deno.statSync(`${path}.5`).ino;
    while (Deno.statSync(`${path}.5`).ino === oldest) tracer.write(event("alice", n++, "x"));
    const second = await page(reader, "alice", 1000, first.nextCursor);
    const onDisk = [`${path}.5`, `${path}.4`, `${path}.3`, `${path}.2`, `${path}.1`, path]
      .flatMap((file) => readTrace(file)).map((e) => e.step);
    assert.deepEqual(second.events.map((e) => e.step), onDisk, "the page goes on from the oldest event left");
  } finally {
    tracer.close();
  }
});

Deno.test("a small AGENT_TRACE_MAX_PAYLOAD_CHARS cuts the data only: the event's time and ids stay whole", async () => {
  using dir = tempDir();
  const path = `${dir.path}/trace.jsonl`;
  const session = "s".repeat(128);
  const tracer = new JsonlTracer(path, { maxPayloadChars: 20, secrets: ["sk-secret-key"] });
  tracer.write(event("alice", 1, `long text ${"y".repeat(100)} sk-secret-key`, session));
  tracer.close();
  const [line] = readTrace(path);
  assert.equal(line.session_id, session);
  assert.equal(line.ts, "2026-01-01T00:00:00.001Z");
  assert.match(String(line.data.text), /^long text y+…\[\d+ more chars\]$/);
  assert.ok(!Deno.readTextFileSync(path).includes("sk-secret-key"));
  const reader = new TraceReader(path);
  const found = await reader.page({
    userId: "alice",
    sessionId: session,
    since: "2026-01-01T00:00:00.000Z",
    runId: null,
    limit: 10,
    cursor: null,
  });
  assert.equal(found.events.length, 1);
});
