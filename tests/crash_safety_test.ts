/**
 * Crash safety: `chat` killed with SIGKILL at random and at chosen moments keeps its database and trace
 * consistent, and the invariant checker the crash test relies on does catch each kind of damage.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { DatabaseSync } from "node:sqlite";
import { checkCrashInvariants, runCrashRounds } from "../scripts/crash_test.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { JsonlTracer, readTrace } from "../src/trace/trace.ts";
import type { RunEvent } from "../src/events.ts";

function tempDir(): { path: string; [Symbol.dispose](): void } {
  const path = Deno.makeTempDirSync({ prefix: "crash-safety-" });
  return { path, [Symbol.dispose]: () => Deno.removeSync(path, { recursive: true }) };
}

function event(name: RunEvent["event"], turn = 1): RunEvent {
  return {
    ts: "2026-01-01T00:00:00.000Z",
    session_id: "s1",
    user_id: "u1",
    run_id: `run-${turn}`,
    turn,
    event: name,
    step: name === "run_start" || name === "run_end" ? null : 0,
    data: {},
  } as unknown as RunEvent;
}

const line = (e: RunEvent) => `${JSON.stringify(e)}\n`;

/** A consistent session: a turn with two tool calls and their results, a summary, and a two-line trace. */
async function validFiles(dir: string): Promise<{ dbPath: string; tracePath: string }> {
  const dbPath = join(dir, "sessions.db");
  const tracePath = join(dir, "traces.jsonl");
  const store = new SqliteStore(dbPath);
  const at = "2026-01-01T00:00:00.000Z";
  const key = { userId: "u1", sessionId: "s1" };
  await store.getOrCreate(key);
  await store.append(key, [
    { id: "m1", role: "user", content: "what is 1+2 and 3*4?", createdAt: at },
    {
      id: "m2",
      role: "assistant",
      content: null,
      toolCalls: [
        { id: "c1", name: "calculator", arguments: '{"expression":"1+2"}' },
        { id: "c2", name: "calculator", arguments: '{"expression":"3*4"}' },
      ],
      createdAt: at,
    },
    { id: "m3", role: "tool", content: '{"ok":true}', toolCallId: "c1", createdAt: at },
    { id: "m4", role: "tool", content: '{"ok":true}', toolCallId: "c2", createdAt: at },
    { id: "m5", role: "assistant", content: "3 and 12", createdAt: at },
  ]);
  const summary = { goals: [], facts: ["User is Ada"], todos: [], unresolved: [], updated_at: at };
  await store.applyCompaction(key, JSON.stringify(summary), [], 0);
  await store.close();
  Deno.writeTextFileSync(tracePath, line(event("run_start")) + line(event("run_end")));
  return { dbPath, tracePath };
}

function breakWith(dbPath: string, sql: string): void {
  const db = new DatabaseSync(dbPath);
  try {
    db.exec(sql);
  } finally {
    db.close();
  }
}

for (const api of ["chat", "anthropic", "responses"] as const) {
  Deno.test(`runCrashRounds() with LLM_API=${api} keeps every invariant over 5 SIGKILLs, in compaction and tools too`, async () => {
    const lines: string[] = [];
    const report = await runCrashRounds({ rounds: 5, seed: 1, api, log: (l) => lines.push(l) });
    assert.deepEqual(report.violations, [], lines.join("\n"));
    assert.equal(report.kills, 5);
    assert.equal(lines.filter((l) => /^round \d+: killed .* — ok$/.test(l)).length, 5, lines.join("\n"));
    assert.ok(lines.includes("final new turn: ok"), lines.join("\n"));
    // The summary_request and tool_blocked rounds force these moments; the timing alone might miss them.
    assert.ok(report.compactionKills >= 1, lines.join("\n"));
    assert.ok(report.toolKillsUnstored >= 1, lines.join("\n"));
    assert.ok(report.compactions >= 1, "compactions happened and were stored");
    assert.ok(report.turns >= 5, `turns stored: ${report.turns}`);
    // Every request spoke the format asked for.
    assert.ok(report.requests[api] > 0);
    assert.equal(Object.values(report.requests).reduce((a, b) => a + b), report.requests[api]);
  });
}

Deno.test("checkCrashInvariants() passes a consistent database and trace, and missing files", async () => {
  using dir = tempDir();
  const { dbPath, tracePath } = await validFiles(dir.path);
  assert.deepEqual(await checkCrashInvariants(dbPath, tracePath), []);
  assert.deepEqual(await checkCrashInvariants(join(dir.path, "none.db"), join(dir.path, "none.jsonl")), []);
});

Deno.test("checkCrashInvariants() reports a tool message without its call and a call without result", async () => {
  using dir = tempDir();
  const { dbPath, tracePath } = await validFiles(dir.path);
  breakWith(
    dbPath,
    "INSERT INTO messages (user_id, session_id, id, role, content, tool_calls, tool_call_id, created_at) " +
      "VALUES ('u1', 's1', 'm6', 'tool', '{}', NULL, 'ghost', 'x'); DELETE FROM messages WHERE id = 'm4'",
  );
  assert.deepEqual(await checkCrashInvariants(dbPath, tracePath), [
    "session s1: call c2 of message m2 has 0 tool messages (expected 1)",
    "session s1: tool message m6 (call ghost) has no assistant call before it",
  ]);
});

Deno.test("checkCrashInvariants() reports a summary that is not summary JSON or has too many items", async () => {
  for (
    const [summary, expected] of [
      ['{"goals": [], "facts": ["Ad', /summary is not summary JSON/],
      ['{"goals": [], "facts": "Ada", "todos": [], "unresolved": []}', /summary is not summary JSON/],
      [
        JSON.stringify({ goals: [], facts: ["1", "2", "3", "4", "5", "6"], todos: [], unresolved: [] }),
        /summary\.facts has 6 items \(at most 5\)/,
      ],
    ] as const
  ) {
    using dir = tempDir();
    const { dbPath, tracePath } = await validFiles(dir.path);
    breakWith(dbPath, `UPDATE sessions SET summary = '${summary}'`);
    const violations = await checkCrashInvariants(dbPath, tracePath);
    assert.ok(violations.some((v) => expected.test(v)), `${summary}: ${violations.join("; ")}`);
  }
});

Deno.test("checkCrashInvariants() reports turn_count != compacted_turns + stored user messages", async () => {
  using dir = tempDir();
  const { dbPath, tracePath } = await validFiles(dir.path);
  breakWith(dbPath, "UPDATE sessions SET turn_count = 3, compacted_turns = 1");
  assert.deepEqual(await checkCrashInvariants(dbPath, tracePath), [
    "session s1: turn_count 3 != compacted_turns 1 + 1 stored user messages",
  ]);
});

Deno.test("checkCrashInvariants() reports a corrupt database file", async () => {
  using dir = tempDir();
  const { dbPath, tracePath } = await validFiles(dir.path);
  // Closing the last connection checkpointed the WAL, so every page is in the file: scribble over page 2.
  const bytes = Deno.readFileSync(dbPath);
  bytes.fill(0xa5, 4096, 4096 + 512);
  Deno.writeFileSync(dbPath, bytes);
  const violations = await checkCrashInvariants(dbPath, tracePath);
  assert.ok(violations.length > 0);
  assert.match(violations[0], /^(integrity_check: |cannot check the database: )/);
});

Deno.test("checkCrashInvariants() reports glued, incomplete and unterminated trace events", async () => {
  using dir = tempDir();
  const { dbPath, tracePath } = await validFiles(dir.path);
  const whole = line(event("run_start"));
  // A line torn by a crash, then the next process's first event glued onto it.
  Deno.writeTextFileSync(tracePath, whole + whole.slice(0, 40) + whole);
  assert.deepEqual(
    (await checkCrashInvariants(dbPath, tracePath)).map((v) => v.replace(/: ".*$/, "")),
    ["trace line 2 is not JSON (a torn or glued line)"],
  );
  // JSON that readTrace would take for an event, but without the required fields.
  Deno.writeTextFileSync(tracePath, '{"ts": "yesterday", "event": "run_start"}\n');
  assert.deepEqual((await checkCrashInvariants(dbPath, tracePath)).map((v) => v.replace(/: ".*$/, "")), [
    "trace line 1 is not an event (bad ts, session_id, user_id, run_id, turn, step, data)",
    "readTrace returned 1 events; the trace has 0 whole event lines",
  ]);
  Deno.writeTextFileSync(tracePath, whole + whole.trimEnd());
  const unterminated = await checkCrashInvariants(dbPath, tracePath);
  assert.equal(unterminated.length, 2, unterminated.join("; "));
  assert.match(unterminated[0], /^trace ends with an unterminated line that parses as an event/);
});

Deno.test("checkCrashInvariants() tolerates a torn last trace line, which readTrace skips", async () => {
  using dir = tempDir();
  const { dbPath, tracePath } = await validFiles(dir.path);
  const whole = line(event("run_start"));
  Deno.writeTextFileSync(tracePath, whole + whole.slice(0, 40));
  assert.deepEqual(await checkCrashInvariants(dbPath, tracePath), []);
  assert.equal(readTrace(tracePath).length, 1);
});

Deno.test("a trace torn by a crash mid-write keeps the next process's first event whole", async () => {
  using dir = tempDir();
  const { dbPath, tracePath } = await validFiles(dir.path);
  // What a SIGKILL inside the tracer's write leaves: the last line cut short, no newline.
  const torn = line(event("run_end"));
  Deno.writeTextFileSync(tracePath, line(event("run_start")) + torn.slice(0, 50));
  // The next process opens a new tracer on the same file and writes its first event.
  const tracer = new JsonlTracer(tracePath);
  tracer.write(event("run_start", 2));
  tracer.close();
  const runs = readTrace(tracePath).map((e) => `${e.event}:${e.turn}`);
  // The tracer cuts the torn fragment off when it opens the file; otherwise the new event would be glued
  // onto it and lost to readers.
  assert.deepEqual(runs, ["run_start:1", "run_start:2"]);
  assert.deepEqual(await checkCrashInvariants(dbPath, tracePath), []);
});
