/**
 * Micro-benchmarks of the runtime's per-turn building blocks, with `Deno.bench`:
 *
 * ```sh
 * deno bench --allow-read --allow-write --allow-env scripts/micro_bench.ts
 * ```
 *
 * The calculator, a context build for a full window, compaction planning over 1,000 messages, one tool
 * turn appended to a store on a temporary file, and one trace event written to a temporary file. The files
 * live in a temporary folder removed when the process ends.
 * @module
 */
import { join } from "node:path";
import { estimateRequestTokens, planCompaction } from "../src/compactor.ts";
import { buildContext, SYSTEM_PROMPT } from "../src/context.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { createBuiltinTools } from "../src/tools/builtin.ts";
import { evaluate } from "../src/tools/calculator.ts";
import { JsonlTracer } from "../src/trace.ts";
import type { RunEvent, StoredMessage } from "../src/types.ts";

/** `turns` calculator turns as stored: user, assistant with a call, tool result, answer. */
function history(turns: number): StoredMessage[] {
  const messages: StoredMessage[] = [];
  const at = "2026-01-01T00:00:00.000Z";
  for (let t = 0; t < turns; t++) {
    const id = `run-${t}`;
    const expression = `${t + 1}*(3+4)`;
    const result = (t + 1) * 7;
    messages.push(
      { id: `${id}:0`, role: "user", content: `what is ${expression}?`, createdAt: at },
      {
        id: `${id}:1`,
        role: "assistant",
        content: null,
        toolCalls: [{ id: `call_${t}`, name: "calculator", arguments: JSON.stringify({ expression }) }],
        createdAt: at,
      },
      {
        id: `${id}:2`,
        role: "tool",
        content: JSON.stringify({ ok: true, data: { expression, result }, error: null, truncated: false }),
        toolCallId: `call_${t}`,
        createdAt: at,
      },
      { id: `${id}:3`, role: "assistant", content: `The answer is ${result}.`, createdAt: at },
    );
  }
  return messages;
}

const SUMMARY = JSON.stringify({
  goals: ["Work through a list of arithmetic questions."],
  facts: ["The user prefers short answers.", "12*(3+4) = 84", "The calculator returned 7."],
  todos: ["Check the totals at the end."],
  unresolved: [],
  updated_at: "2026-01-01T00:00:00.000Z",
});

const window = history(10);
const long = history(250);

const dir = Deno.makeTempDirSync({ prefix: "mra-micro-bench-" });
const store = new SqliteStore(join(dir, "sessions.db"));
const key = { userId: "bench", sessionId: "micro" };
await store.getOrCreate(key);
// What every request carries besides its messages: the system prompt and the built-in tools' schemas.
const fixedTokens = estimateRequestTokens(
  [{ role: "system", content: SYSTEM_PROMPT }],
  createBuiltinTools(store).schemas(),
);
const tracer = new JsonlTracer(join(dir, "traces.jsonl"));
globalThis.addEventListener("unload", () => {
  tracer.close();
  store.close();
  Deno.removeSync(dir, { recursive: true });
});

let appended = 0;
const event: RunEvent = {
  ts: "2026-01-01T00:00:00.000Z",
  session_id: "micro",
  user_id: "bench",
  run_id: "00000000-0000-4000-8000-000000000000",
  turn: 1,
  event: "tool_result",
  step: 0,
  data: { id: "call_1", name: "calculator", ok: true, data: { expression: "12*(3+4)", result: 84 } },
};

Deno.bench("calculator: evaluate 12*(3+4)**2-7/3", { group: "pure" }, () => {
  evaluate("12*(3+4)**2-7/3");
});

Deno.bench("context: buildContext over 40 messages with a summary", { group: "pure" }, () => {
  buildContext(window, { summary: SUMMARY });
});

Deno.bench("compaction: planCompaction over 1,000 messages", { group: "pure" }, () => {
  planCompaction(long, { maxRawTurns: 20, maxCtxTokens: 6000, fixedTokens });
});

Deno.bench("store: append one tool turn (2 calls + 2 results), temp file", { group: "io" }, async () => {
  const id = `turn-${appended++}`;
  const at = "2026-01-01T00:00:00.000Z";
  const result = JSON.stringify({
    ok: true,
    data: { expression: "1+2", result: 3 },
    error: null,
    truncated: false,
  });
  await store.append(key, [
    {
      id: `${id}:0`,
      role: "assistant",
      content: null,
      toolCalls: [
        { id: `${id}-a`, name: "calculator", arguments: '{"expression":"1+2"}' },
        { id: `${id}-b`, name: "calculator", arguments: '{"expression":"1+2"}' },
      ],
      createdAt: at,
    },
    { id: `${id}:1`, role: "tool", content: result, toolCallId: `${id}-a`, createdAt: at },
    { id: `${id}:2`, role: "tool", content: result, toolCallId: `${id}-b`, createdAt: at },
  ]);
});

Deno.bench("trace: JsonlTracer.write one event, temp file", { group: "io" }, () => {
  tracer.write(event);
});
