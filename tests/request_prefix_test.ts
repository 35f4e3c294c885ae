/**
 * What makes a provider's prompt cache hit: each request of a session starts with the bytes of the one
 * before — system messages, tools, summary, older turns — up to the recall of the user's memory (the one block
 * that may change at every turn, just before the turn's question), until a compaction rewrites them. 30 turns through
 * `runTurn` on a SQLite file, the real `HttpLLM` on a fetch that records every body; some turns
 * call tools, and the user's memory recalls other items at other turns.
 */
import assert from "node:assert/strict";
import { join } from "node:path";
import { runTurn } from "../src/agent/loop.ts";
import { SYSTEM_PROMPT } from "../src/agent/context.ts";
import { HttpLLM } from "../src/llm/client.ts";
import { RUNTIME_CONTEXT_HEADER } from "../src/memory/summary.ts";
import { SqliteStore } from "../src/store/sqlite.ts";
import { harness, steppingClock, tempDir } from "./_harness.ts";

type WireMessage = { role: string; content: string | null; tool_calls?: unknown[] };

/** One request the provider saw: the body as sent, parsed, and the compactions stored before it was sent. */
interface Sent {
  text: string;
  messages: WireMessage[];
  tools: unknown;
  compactions: number;
}

/** The user's messages: arithmetic and todo turns call a tool; the words recall different memory items. */
function question(turn: number): string {
  switch (turn % 5) {
    case 0:
      return `What is ${turn}*(3+4)?`;
    case 1:
      return `Tell me something about my dog, turn ${turn}.`;
    case 2:
      return `Add a todo: walk in Oslo ${turn}`;
    case 3:
      return `Which tea do I like? (${turn})`;
    default:
      return `Thanks, that is all for turn ${turn}.`;
  }
}

/** The user's memory before the session: each item matches the words of some questions only. */
const MEMORY = ["The user's dog is called Rex", "The user lives in Oslo", "The user likes green tea"];

/** Answers like a small model: a tool call for arithmetic or a todo, an answer to a tool result or a message. */
function reply(messages: readonly WireMessage[], n: number): Record<string, unknown> {
  // The model answers the dialogue's last message (the runtime's system blocks never end a request).
  const last = messages.findLast((m) => m.role !== "system");
  const call = (name: string, args: Record<string, unknown>) => ({
    role: "assistant",
    content: null,
    tool_calls: [{ id: `call_${n}`, type: "function", function: { name, arguments: JSON.stringify(args) } }],
  });
  if (last?.role === "tool") return { role: "assistant", content: `Done: ${last.content}` };
  const text = last?.content ?? "";
  const sum = /What is (.+)\?/.exec(text);
  if (sum !== null) return call("calculator", { expression: sum[1] });
  const todo = /Add a todo: (.+)$/.exec(text);
  if (todo !== null) return call("todo", { action: "add", text: todo[1] });
  return { role: "assistant", content: `Noted (${n}).` };
}

/**
 * A session of `turns` turns on a SQLite file whose history is read back from the database at every turn,
 * returning every request body. `compactions` is read at each request: how many have been stored.
 */
async function session(options: { turns: number; maxRawTurns: number; compactBatch?: number }) {
  using dir = tempDir();
  const store = new SqliteStore(join(dir.path, "sessions.db"), { now: steppingClock(), cacheSessions: 0 });
  await using _closed = { [Symbol.asyncDispose]: () => store.close() };
  const sent: Sent[] = [];
  let compactions = 0;
  const fetch: typeof globalThis.fetch = (_input, init) => {
    const text = String(init?.body);
    const body = JSON.parse(text);
    sent.push({ text, messages: body.messages, tools: body.tools, compactions });
    const message = reply(body.messages, sent.length);
    const usage = { prompt_tokens: Math.ceil(text.length / 4), completion_tokens: 5, total_tokens: 0 };
    const choice = { index: 0, message, finish_reason: message.tool_calls ? "tool_calls" : "stop" };
    return Promise.resolve(Response.json({ model: body.model, choices: [choice], usage }));
  };
  using h = harness([], {
    store,
    maxRawTurns: options.maxRawTurns,
    compactBatch: options.compactBatch,
    maxCtxTokens: 1_000_000,
    userMemory: { items: 200, recall: 5 },
  });
  const llm = new HttpLLM({ baseUrl: "http://127.0.0.1:9/v1", model: "m", fetch, retries: 0 });
  const agent = { ...h.agent, llm };
  await store.remember("u", { items: MEMORY, limit: 200 });
  for (let turn = 0; turn < options.turns; turn++) {
    const result = await runTurn({ userId: "u", sessionId: "s", message: question(turn) }, agent, h.run);
    assert.equal(result.outcome, "answered", `turn ${turn}: ${result.answer}`);
    await agent.compactions.idle();
    compactions = h.events.filter((e) => e.event === "compact" && e.data.ok === true).length;
  }
  return sent;
}

/** A block of the user's recalled memory: the runtime's only per-turn text in a request. */
function isRecall(message: WireMessage | undefined): boolean {
  return message?.role === "system" && (message.content ?? "").startsWith(RUNTIME_CONTEXT_HEADER) &&
    (message.content ?? "").includes('"user_memory":');
}

/**
 * Where consecutive requests break the prefix rule: request k's messages up to its recall block (all of them
 * without one) must be, byte for byte, the start of request k+1's messages array, request k's messages less
 * the recall the start of request k+1's less its recall, and the tools the same. Each body must be canonical
 * JSON, so the parts re-serialized here are the bytes that were sent.
 */
function prefixBreaks(sent: readonly Sent[]): number[] {
  const breaks: number[] = [];
  for (const request of sent) {
    assert.equal(JSON.stringify(JSON.parse(request.text)), request.text, "the body is canonical JSON");
  }
  for (let k = 0; k + 1 < sent.length; k++) {
    const [before, after] = [sent[k], sent[k + 1]];
    const recall = before.messages.findIndex(isRecall);
    const cached = recall < 0 ? before.messages : before.messages.slice(0, recall);
    const same = startsWith(after.messages, cached) &&
      startsWith(after.messages.filter((m) => !isRecall(m)), before.messages.filter((m) => !isRecall(m))) &&
      JSON.stringify(after.tools) === JSON.stringify(before.tools);
    if (!same) breaks.push(k + 1);
  }
  return breaks;
}

/** Whether `messages` start, byte for byte, with `prefix` and go on after it. */
function startsWith(messages: readonly WireMessage[], prefix: readonly WireMessage[]): boolean {
  return JSON.stringify(messages).startsWith(`${JSON.stringify(prefix).slice(0, -1)},`);
}

/** Where a recall block sits: just before the last user message, and never last. */
function assertRecallPlaced(request: Sent): void {
  const recall = request.messages.findIndex(isRecall);
  if (recall < 0) return;
  assert.equal(request.messages.findLastIndex(isRecall), recall, "one recall block");
  assert.equal(request.messages[recall + 1]?.role, "user");
  assert.equal(
    request.messages.findLastIndex((m) => m.role === "user"),
    recall + 1,
    "before the turn's question",
  );
}

Deno.test("runTurn() sends each request of a 30-turn session as the previous one plus what was added", async () => {
  const sent = await session({ turns: 30, maxRawTurns: 1000 });
  // Six arithmetic and six todo turns: two requests each, with the call and its result in later history.
  assert.equal(sent.length, 30 + 12);
  assert.ok(sent.some((r) => r.messages.some((m) => m.role === "tool")), "tool results are in history");
  assert.ok(sent.every((r) => r.compactions === 0), "no compaction");
  const recalls = new Set(sent.map((r) => r.messages.find(isRecall)?.content ?? null));
  assert.ok(recalls.size >= 3, `turns recall different items: ${recalls.size} different blocks`);
  assert.deepEqual(prefixBreaks(sent), [], "requests whose prefix changed");
  // Nothing that changes from request to request comes before the history: the first messages are the same.
  for (const request of sent) {
    const first = request.messages.findIndex((m) => m.role !== "system");
    const fixed = request.messages.slice(0, first).filter((m) => !isRecall(m));
    assert.deepEqual(fixed, [{ role: "system", content: SYSTEM_PROMPT }]);
    assertRecallPlaced(request);
    assert.notEqual(request.messages.at(-1)!.role, "system");
  }
});

Deno.test("runTurn() changes the request prefix once at each compaction, and keeps it between them", async () => {
  const sent = await session({ turns: 30, maxRawTurns: 4, compactBatch: 2 });
  const atCompaction = sent.flatMap((r, k) => k > 0 && r.compactions !== sent[k - 1].compactions ? [k] : []);
  assert.ok(atCompaction.length >= 5, `compactions: ${atCompaction.length}`);
  assert.deepEqual(prefixBreaks(sent), atCompaction, "the prefix changes exactly at the compactions");
  for (const request of sent) {
    assert.deepEqual(request.messages[0], { role: "system", content: SYSTEM_PROMPT });
    assert.equal(JSON.stringify(request.tools), JSON.stringify(sent[0].tools), "the tools never change");
  }
});

Deno.test("prefixBreaks() finds every request whose system prompt carries a per-request timestamp", async () => {
  const sent = await session({ turns: 4, maxRawTurns: 1000 });
  const stamped = sent.map((request, k) => {
    const prompt = { role: "system", content: `${SYSTEM_PROMPT}\nNow: 2026-01-01T00:00:0${k}Z` };
    const messages = [prompt, ...request.messages.slice(1)];
    return { ...request, messages, text: JSON.stringify({ ...JSON.parse(request.text), messages }) };
  });
  assert.deepEqual(prefixBreaks(sent), []);
  assert.deepEqual(prefixBreaks(stamped), sent.slice(1).map((_, k) => k + 1));
});
