import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { clip, JsonlTracer, readTrace, traceFiles } from "../src/trace/trace.ts";
import type { RunEvent } from "../src/events.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { SharedTrace } from "../src/trace/shared_trace.ts";
import { childEnv, tempDir } from "./_harness.ts";
import { fc } from "./_fast_check.ts";
import { redact } from "../src/redact.ts";
import { shorten } from "../src/shorten.ts";

const event = (n: number, data: Record<string, unknown> = {}): RunEvent => ({
  ts: "2026-01-01T00:00:00.000Z",
  session_id: "s",
  user_id: "u",
  run_id: "r",
  turn: 1,
  event: "llm_call",
  step: n,
  data,
} as unknown as RunEvent);

Deno.test("JsonlTracer appends one JSON line per event with every field", () => {
  using dir = tempDir();
  const path = `${dir.path}/nested/t.jsonl`;
  const tracer = new JsonlTracer(path);
  tracer.write(event(0, { model: "m" }));
  tracer.write(event(1));
  tracer.close();
  const lines = Deno.readTextFileSync(path).split("\n");
  assert.equal(lines.length, 3);
  assert.equal(lines[2], "");
  assert.deepEqual(JSON.parse(lines[0]), event(0, { model: "m" }));
  new JsonlTracer(path).close();
  const again = new JsonlTracer(path);
  again.write(event(2));
  again.close();
  assert.deepEqual(readTrace(path).map((e) => e.step), [0, 1, 2], "append-only across handles");
});

Deno.test("JsonlTracer writes short and long lines of any characters whole, and hands on each event as written", () => {
  using dir = tempDir();
  const path = `${dir.path}/t.jsonl`;
  const handed: Record<string, unknown>[] = [];
  const tracer = new JsonlTracer(path, { maxPayloadChars: 50_000, onAppend: (event) => handed.push(event) });
  const texts = ["é€😀".repeat(4000), "short", "x".repeat(30_000), "ü"];
  texts.forEach((text, i) => tracer.write(event(i, { text })));
  tracer.close();
  assert.deepEqual(readTrace(path).map((e) => e.data.text), texts);
  assert.deepEqual(handed, readTrace(path), "the events as the file holds them");
});

Deno.test("JsonlTracer cuts long strings and redacts secrets", () => {
  using dir = tempDir();
  const path = `${dir.path}/t.jsonl`;
  const tracer = new JsonlTracer(path, { maxPayloadChars: 10, secrets: ["sk-SECRET"] });
  tracer.write(event(0, { text: "x".repeat(25), nested: [{ key: "uses sk-SECRET here" }] }));
  tracer.close();
  const text = Deno.readTextFileSync(path);
  assert.ok(!text.includes("sk-SECRET"));
  const [e] = readTrace(path);
  assert.equal(e.data.text, "xxxxxxxxxx…[15 more chars]");
  assert.equal((e.data.nested as { key: string }[])[0].key, "uses [reda…[10 more chars]");
  assert.deepEqual(clip({ n: 1, b: true, z: null }, 1), { n: 1, b: true, z: null });
});

/** clip() as it was written first: every value copied. Its JSON is what a trace line must stay. */
function copyingClip(value: unknown, max: number, secrets: readonly string[]): unknown {
  if (typeof value === "string") {
    return shorten(redact(value, secrets), max, { marker: (cut) => `…[${cut} more chars]` });
  }
  if (Array.isArray(value)) return value.map((item) => copyingClip(item, max, secrets));
  if (typeof value !== "object" || value === null) return value;
  const out: Record<string, unknown> = {};
  for (const [key, item] of Object.entries(value)) out[key] = copyingClip(item, max, secrets);
  return out;
}

Deno.test("clip() hands back what it leaves whole, and its JSON is a full copy's", () => {
  const whole = { text: "short", list: [1, "two", { three: null }] };
  assert.equal(clip(whole, 10), whole);
  const cut = clip({ keep: whole.list, text: "x".repeat(12) }, 10) as Record<string, unknown>;
  assert.equal(cut.keep, whole.list);
  assert.equal(cut.text, "xxxxxxxxxx…[2 more chars]");
  class Point {
    x = 1;
    toJSON() {
      return "a point";
    }
  }
  const odd = [
    new Date(0),
    new Point(),
    JSON.parse('{"__proto__": {"a": 1}, "b": "sk-SECRET"}'),
    Object.assign(Object.create(null), { a: "b" }),
    [1, , 3], // a hole
    { nested: [new Map([[1, 2]]), undefined, () => 1] },
  ];
  for (const value of odd) {
    for (const secrets of [[], ["sk-SECRET"]]) {
      assert.equal(JSON.stringify(clip(value, 3, secrets)), JSON.stringify(copyingClip(value, 3, secrets)));
    }
  }
  fc.assert(
    fc.property(fc.jsonValue(), fc.integer({ min: 1, max: 8 }), fc.boolean(), (value, max, secret) => {
      const secrets = secret ? ["a"] : [];
      assert.equal(
        JSON.stringify(clip(value, max, secrets)),
        JSON.stringify(copyingClip(value, max, secrets)),
      );
    }),
  );
});

Deno.test("JsonlTracer warns once and keeps going when the trace cannot be written", () => {
  using dir = tempDir();
  Deno.writeTextFileSync(`${dir.path}/file`, "");
  const warnings: string[] = [];
  const tracer = new JsonlTracer(`${dir.path}/file/t.jsonl`, { warn: (m) => warnings.push(m) });
  tracer.write(event(0));
  tracer.write(event(1));
  tracer.close();
  assert.equal(warnings.length, 1);
  assert.match(warnings[0], /cannot write the trace to .*file\/t\.jsonl/);
});

Deno.test("readTrace() skips a torn last line and never parses it as an event", () => {
  using dir = tempDir();
  const path = `${dir.path}/t.jsonl`;
  Deno.writeTextFileSync(path, JSON.stringify(event(0)) + "\n" + JSON.stringify(event(1)).slice(0, 30));
  assert.deepEqual(readTrace(path).map((e) => e.step), [0]);
  assert.deepEqual(readTrace(`${dir.path}/missing.jsonl`), []);
});

Deno.test("JsonlTracer cuts a torn last line off before writing, so every line is a whole event", () => {
  using dir = tempDir();
  const path = `${dir.path}/t.jsonl`;
  Deno.writeTextFileSync(path, JSON.stringify(event(0)) + "\n" + JSON.stringify(event(1)).slice(0, 30));
  const tracer = new JsonlTracer(path);
  tracer.write(event(2));
  tracer.close();
  const lines = Deno.readTextFileSync(path).split("\n");
  assert.deepEqual(lines.slice(0, -1).map((l) => JSON.parse(l).step), [0, 2]);
  assert.equal(lines.at(-1), "");
});

/** Every line of every trace file of `path` (oldest file first), each parsed; throws on a torn line. */
function allLines(path: string): RunEvent[] {
  return traceFiles(path).flatMap((file) => {
    let text = "";
    try {
      text = Deno.readTextFileSync(file);
    } catch {
      return [];
    }
    assert.ok(text === "" || text.endsWith("\n"), `${file} ends with a whole line`);
    return text.split("\n").slice(0, -1).map((line) => JSON.parse(line));
  });
}

Deno.test("JsonlTracer rotates at maxBytes into .1 (newest) … .5 and deletes older files", () => {
  using dir = tempDir();
  const path = `${dir.path}/traces.jsonl`;
  const tracer = new JsonlTracer(path, { maxBytes: 1000 });
  for (let n = 0; n < 200; n++) tracer.write(event(n, { pad: "x".repeat(50) }));
  tracer.close();
  const names = [...Deno.readDirSync(dir.path)].map((entry) => entry.name).sort();
  assert.deepEqual(names, ["traces.jsonl", ...[1, 2, 3, 4, 5].map((i) => `traces.jsonl.${i}`)]);
  for (const file of traceFiles(path)) assert.ok(Deno.statSync(file).size <= 1000, `${file} fits maxBytes`);
  // The files hold the newest events, in order, without a gap; .1 is older than the live file.
  const steps = allLines(path).map((e) => e.step!);
  assert.equal(steps.at(-1), 199);
  assert.deepEqual(steps, steps.map((_, i) => steps[0] + i));
  assert.ok(readTrace(`${path}.1`).every((e) => e.step! < readTrace(path)[0].step!));
});

Deno.test("two tracers appending to one path across rotations lose no event and keep every line whole", () => {
  using dir = tempDir();
  const path = `${dir.path}/traces.jsonl`;
  // Two processes' worth: each has its own handle, and each notices when the other rotated the file.
  const first = new JsonlTracer(path, { maxBytes: 8000 });
  const second = new JsonlTracer(path, { maxBytes: 8000 });
  // Lines of two lengths, so the short one of the writer that did not rotate would still fit the old file.
  for (let n = 0; n < 240; n++) {
    if (n % 2 === 0) first.write(event(n, { pad: "y".repeat(60) }));
    else second.write(event(n, { pad: "z" }));
  }
  first.close();
  second.close();
  assert.ok(Deno.statSync(`${path}.2`).isFile, "the trace rotated more than once");
  assert.equal(existsSync(`${path}.6`), false);
  // In order, too: after one writer rotated, the other's next line goes to the new file, not the renamed one.
  assert.deepEqual(allLines(path).map((e) => e.step!), Array.from({ length: 240 }, (_, n) => n));
});

/** Runs tests/_trace_writer.ts with `args`; resolves to the number it printed. */
async function traceWriter(dir: string, args: string[]): Promise<number> {
  const { code, stdout, stderr } = await new Deno.Command(Deno.execPath(), {
    args: [
      "run",
      "--no-prompt",
      `--allow-read=${dir}`,
      `--allow-write=${dir}`,
      "tests/_trace_writer.ts",
      ...args,
    ],
    env: childEnv(dir),
    clearEnv: true,
    stdout: "piped",
    stderr: "piped",
  }).output();
  const decoder = new TextDecoder();
  assert.equal(code, 0, decoder.decode(stderr));
  return Number(decoder.decode(stdout).trim());
}

Deno.test("a process opening the trace while another appends to it never cuts the other's line as torn", async () => {
  using dir = tempDir();
  const path = `${dir.path}/traces.jsonl`;
  const stop = `${dir.path}/stop`;
  // One process writes until told to stop; the other opens the file afresh (checking it for a torn line)
  // for each of its events, meanwhile. A check that read the first one's line half written would cut it.
  const steady = traceWriter(dir.path, [path, "steady", "until", stop]);
  while (!existsSync(path) || Deno.statSync(path).size === 0) await new Promise((r) => setTimeout(r, 5));
  const reopened = await traceWriter(dir.path, [path, "reopening", "reopen", "3000"]);
  Deno.writeTextFileSync(stop, "");
  const written = await steady;
  const lines = allLines(path);
  const steps = (name: string) => lines.filter((e) => e.session_id === name).map((e) => e.step!);
  assert.equal(reopened, 3000);
  assert.deepEqual(steps("reopening"), Array.from({ length: reopened }, (_, n) => n));
  assert.deepEqual(steps("steady"), Array.from({ length: written }, (_, n) => n));
});

Deno.test("a small AGENT_TRACE_MAX_PAYLOAD_CHARS cuts the data only: the event's time and ids stay whole", async () => {
  using dir = tempDir();
  const path = `${dir.path}/trace.jsonl`;
  const session = "s".repeat(128);
  const store = new SqliteStore(":memory:");
  const shared = new SharedTrace(store.trace);
  const tracer = new JsonlTracer(path, {
    maxPayloadChars: 20,
    secrets: ["sk-secret-key"],
    onAppend: (event, line) => shared.add(event, line),
  });
  const text = `long text ${"y".repeat(100)} sk-secret-key`;
  tracer.write({
    ...event(1, { text }),
    user_id: "alice",
    session_id: session,
    ts: "2026-01-01T00:00:00.001Z",
  });
  tracer.close();
  try {
    const [line] = readTrace(path);
    assert.equal(line.session_id, session);
    assert.equal(line.ts, "2026-01-01T00:00:00.001Z");
    assert.match(String(line.data.text), /^long text y+…\[\d+ more chars\]$/);
    assert.ok(!Deno.readTextFileSync(path).includes("sk-secret-key"));
    const query = { userId: "alice", sessionId: session, since: "2026-01-01T00:00:00.000Z", runId: null };
    const found = await shared.page({ ...query, limit: 10, cursor: null });
    assert.deepEqual(found.events, [line], "the table holds the event as the file does");
  } finally {
    await shared.close();
    await store.close();
  }
});
