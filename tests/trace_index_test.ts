/** The trace index stays under its bound in bytes, dropping the least recently read files' indexes. */
import assert from "node:assert/strict";
import type { RunEvent } from "../src/events.ts";
import { type TraceFile, TraceReader } from "../src/trace/reader.ts";
import { JsonlTracer, readTrace, traceFiles } from "../src/trace/trace.ts";
import { tempDir } from "./_harness.ts";

const START = Date.UTC(2026, 0, 1);

function event(session: string, step: number, run: string): RunEvent {
  return {
    ts: new Date(START + step * 1000).toISOString(),
    session_id: session,
    user_id: "u",
    run_id: run,
    turn: 1,
    event: "llm_call",
    step,
    data: { pad: "p".repeat(40) },
  } as unknown as RunEvent;
}

/** Opens trace files counting the bytes read from them. */
function countingOpen() {
  const state = { bytes: 0 };
  const open = async (path: string): Promise<TraceFile> => {
    const file = await Deno.open(path);
    return {
      read: async (buffer) => {
        const n = await file.read(buffer);
        state.bytes += n ?? 0;
        return n;
      },
      seek: (offset, whence) => file.seek(offset, whence),
      stat: () => file.stat(),
      close: () => file.close(),
    };
  };
  return { state, open };
}

/** Every step of `session`'s events since `since` (ms), a page of `limit` at a time. */
async function allSteps(reader: TraceReader, session: string, since = START, limit = 7): Promise<number[]> {
  const steps: number[] = [];
  let cursor = null;
  do {
    const query = { userId: "u", sessionId: session, runId: null, limit, cursor };
    const page = await reader.page({ ...query, since: new Date(since).toISOString() });
    steps.push(...page.events.map((e) => e.step as number));
    cursor = page.nextCursor;
  } while (cursor !== null);
  return steps;
}

/** A trace of six files (at 4000 bytes each) of two sessions, "a" and "b", in runs of 8 events; a's steps. */
function writeTrace(path: string): number[] {
  const tracer = new JsonlTracer(path, { maxBytes: 4000 });
  for (let n = 0; !exists(`${path}.5`); n++) {
    tracer.write(event(n % 2 === 0 ? "a" : "b", n, `run-${n >> 3}`));
  }
  tracer.close();
  const events = traceFiles(path).flatMap((file) => readTrace(file, (e) => e.session_id === "a"));
  return events.map((e) => e.step as number);
}

function exists(path: string): boolean {
  try {
    return Deno.statSync(path).isFile;
  } catch {
    return false;
  }
}

Deno.test("TraceReader keeps its index under maxIndexBytes and still pages every event, in order", async () => {
  using dir = tempDir();
  const path = `${dir.path}/trace.jsonl`;
  const expected = writeTrace(path);
  const unbounded = new TraceReader(path);
  assert.deepEqual(await allSteps(unbounded, "a"), expected);
  const whole = unbounded.indexBytes;
  const reader = new TraceReader(path, { maxIndexBytes: Math.floor(whole / 3) });
  await reader.refresh();
  assert.ok(reader.indexBytes <= whole / 3, `${reader.indexBytes} of ${whole}`);
  // Paging reaches back into the dropped files, indexes them again and drops others.
  assert.deepEqual(await allSteps(reader, "a"), expected);
  assert.ok(reader.indexBytes <= whole / 3, `${reader.indexBytes} of ${whole}`);
  assert.deepEqual(await allSteps(reader, "a", START, 1000), expected);
  assert.throws(() => new TraceReader(path, { maxIndexBytes: -1 }), RangeError);
});

Deno.test("TraceReader never reads a dropped file again for a session begun after its last event", async () => {
  using dir = tempDir();
  const path = `${dir.path}/trace.jsonl`;
  const expected = writeTrace(path);
  const { state, open } = countingOpen();
  // Room for the file being written only: every rotated file's index is dropped.
  const reader = new TraceReader(path, { open, maxIndexBytes: 1 });
  await reader.refresh();
  const tracer = new JsonlTracer(path, { maxBytes: 4000, onAppend: (line) => reader.noteAppend(line) });
  tracer.write(event("late", 1000, "late-run"));
  tracer.close();
  state.bytes = 0;
  assert.deepEqual(await allSteps(reader, "late", START + 1000 * 1000), [1000]);
  const line = JSON.stringify(event("late", 1000, "late-run")).length + 1;
  assert.equal(state.bytes, line, "only the page's own line is read");
  // An older session's page must index the dropped files again: it reads them.
  state.bytes = 0;
  assert.deepEqual(await allSteps(reader, "a"), expected);
  assert.ok(state.bytes > 5 * 3000, `${state.bytes} bytes read`);
});
