import assert from "node:assert/strict";
import { existsSync } from "node:fs";
import { DemoModel, extractExpression } from "../src/demo/model.ts";
import { runDemo } from "../src/demo/demo.ts";
import type { Summarizer } from "../src/memory/summarizer.ts";

/** Runs the demo in-process and returns its result and output. */
async function demo(options: Parameters<typeof runDemo>[0] = {}) {
  const lines: string[] = [];
  const result = await runDemo({ ...options, out: (line) => lines.push(line) });
  return { result, lines, text: lines.join("\n") };
}

/** The temp directory the demo announces on its second line. */
function announcedDir(lines: string[]): string {
  const match = /^database (.+)\/sessions\.db,/.exec(lines[1] ?? "");
  assert.ok(match, `the second line names the database: ${lines[1]}`);
  return match[1];
}

Deno.test("runDemo() passes all five phases offline and prints each verdict, the summary and the timeline", async () => {
  const { result, lines, text } = await demo();
  assert.deepEqual(result, { passed: 5, failed: 0 }, text);
  for (
    const phase of [
      "Phase 1 · Calculator loop",
      "Phase 2 · Two windows",
      "Phase 3 · Follow-up after compaction",
      "Phase 4 · Memory across windows",
      "Phase 5 · Trace",
    ]
  ) {
    assert.ok(lines.some((line) => line.startsWith(`PASS  ${phase}: `)), `${phase} passes`);
  }
  assert.doesNotMatch(text, /^FAIL/m);
  // The tool calls and answers are shown as they happen.
  assert.match(text, /calculator\(\{"expression":"17 \* 23 \+ 19"\}\)/);
  assert.match(text, /agent › 17 \* 23 \+ 19 = 410/);
  assert.match(text, /agent › Your favourite colour is teal\./);
  // The summary is printed field by field before the follow-up.
  assert.match(text, /summary \(sessions\.summary/);
  assert.match(text, /facts: +- .*favourite colour is teal/);
  // The timeline shows the events with their columns.
  // A compaction after the answer has no loop step: "-".
  assert.match(text, /compact +- +- +\d+ms +\d+→\d+ +ok/);
  assert.match(text, /agent › Your project is called Heron\./);
  assert.match(text, /agent › I don't know what your project is called\./, "the other user's window");
  assert.equal(lines.at(-1), "5/5 phases passed");
  assert.ok(!text.includes("\x1b["), "no ANSI codes without color");
  assert.equal(existsSync(announcedDir(lines)), false, "the temp directory is removed");
});

Deno.test("runDemo() fails phase 3 when the model ignores the [RUNTIME CONTEXT] summary", async () => {
  const { result, lines, text } = await demo({
    phases: [3],
    llm: new DemoModel({ readRuntimeContext: false }),
  });
  assert.deepEqual(result, { passed: 0, failed: 1 }, text);
  const verdict = lines.find((line) => line.startsWith("FAIL  Phase 3"));
  assert.ok(verdict, text);
  assert.match(verdict, /the answer does not mention teal/);
  // Compaction itself worked: the failure is the model's, and the verdict says only that.
  assert.doesNotMatch(verdict, /no compaction succeeded|outside the \[RUNTIME CONTEXT\]/);
  assert.match(text, /agent › I don't know your favourite colour\./);
  assert.equal(lines.at(-1), "0/1 phases passed");
});

Deno.test("runDemo() fails phase 3 naming the reason when every summary is invalid", async () => {
  const broken: Summarizer = () => Promise.resolve({ text: "not json", usage: null });
  const { result, lines, text } = await demo({ phases: [3], summarizer: broken });
  assert.deepEqual(result, { passed: 0, failed: 1 }, text);
  const verdict = lines.find((line) => line.startsWith("FAIL  Phase 3")) ?? "";
  assert.match(verdict, /no compaction succeeded \(summary is not valid JSON/);
  assert.match(verdict, /the early fact is still a raw stored user message/);
});

Deno.test("runDemo() fails phase 5 when the trace has no compact event", async () => {
  const { result, lines } = await demo({ phases: [1, 5] });
  assert.deepEqual(result, { passed: 1, failed: 1 });
  assert.ok(lines.some((line) => /^FAIL {2}Phase 5 · Trace: .*the trace has no compact event/.test(line)));
});

Deno.test("runDemo() phase 4 passes on its own and fails when the model ignores the [RUNTIME CONTEXT] block", async () => {
  assert.deepEqual((await demo({ phases: [4] })).result, { passed: 1, failed: 0 });
  const { result, lines, text } = await demo({
    phases: [4],
    llm: new DemoModel({ readRuntimeContext: false }),
  });
  assert.deepEqual(result, { passed: 0, failed: 1 }, text);
  const verdict = lines.find((line) => line.startsWith("FAIL  Phase 4 · Memory across windows")) ?? "";
  assert.match(verdict, /window 3's answer does not name Heron/);
  // The memory did its part: the fact was written at compaction and reached window 3's request.
  assert.doesNotMatch(verdict, /wrote the user's memory|does not carry the fact|user-B/);
});

Deno.test("runDemo() keeps the temp directory with its database and trace when keep is set", async () => {
  const { result, lines } = await demo({ phases: [1], keep: true });
  const dir = announcedDir(lines);
  try {
    assert.deepEqual(result, { passed: 1, failed: 0 });
    assert.ok(lines.includes(`kept ${dir}`));
    assert.ok(existsSync(`${dir}/sessions.db`) && existsSync(`${dir}/trace.jsonl`));
  } finally {
    Deno.removeSync(dir, { recursive: true });
  }
});

Deno.test("runDemo() rejects an unknown phase number before creating anything", async () => {
  await assert.rejects(runDemo({ phases: [6], out: () => {} }), {
    name: "RangeError",
    message: "Cannot run the demo: no phase 6 (1-5)",
  });
});

Deno.test("DemoModel answers from the request it is sent, not from a script", async () => {
  const model = new DemoModel();
  const tools = [{ name: "calculator", description: "", parameters: {} }];
  const first = await model.chat([{ role: "user", content: "what is 2 ** 10 - 24?" }], { tools });
  assert.equal(first.toolCalls[0].name, "calculator");
  assert.deepEqual(JSON.parse(first.toolCalls[0].arguments), { expression: "2 ** 10 - 24" });
  assert.ok((first.usage?.promptTokens ?? 0) > 0);
  // The answer repeats whatever the tool said, even a wrong result: it reads, it does not compute.
  const second = await model.chat([
    { role: "user", content: "what is 2 ** 10 - 24?" },
    { role: "assistant", content: null, toolCalls: first.toolCalls },
    {
      role: "tool",
      toolCallId: first.toolCalls[0].id,
      content: JSON.stringify({ ok: true, data: { expression: "2 ** 10 - 24", result: 7 }, error: null }),
    },
  ], { tools });
  assert.equal(second.content, "2 ** 10 - 24 = 7");
  // Without the tool on offer it says so instead of calling it.
  const bare = await model.chat([{ role: "user", content: "what is 1 + 1?" }]);
  assert.deepEqual(bare.toolCalls, []);
  assert.match(bare.content ?? "", /calculator tool/);
});

Deno.test("extractExpression() finds the longest arithmetic run and ignores plain numbers", () => {
  assert.equal(extractExpression("Quick check: what is 12 * (3 + 4)?"), "12 * (3 + 4)");
  assert.equal(extractExpression("What is 17 * 23 + 19?"), "17 * 23 + 19");
  assert.equal(extractExpression("I have 3 cats."), null);
});
