/** The web page as the server serves it: its files, their headers, and the page's pure parts. */
import assert from "node:assert/strict";
import { CONTENT_SECURITY_POLICY, WEB_FILES } from "../src/http/web_route.ts";
import { parseSseFrames } from "../src/web/api.js";
import { completeDecisions, formatArguments } from "../src/web/approvals.js";
import { buildTimeline, groupRuns } from "../src/web/timeline.js";
import { httpHarness } from "./_http_harness.ts";

const TOKENS = [{ token: "tok-alice-0123456789", userId: "alice" }];
const get = (path: string, method = "GET") => new Request(`http://agent.test${path}`, { method });

Deno.test("GET / serves the page without auth, under a policy that allows only its own files", async () => {
  using h = httpHarness({ tokens: TOKENS });
  const response = await h.handler(get("/"));
  assert.equal(response.status, 200);
  assert.equal(response.headers.get("content-type"), "text/html; charset=utf-8");
  const policy = response.headers.get("content-security-policy") ?? "";
  assert.equal(policy, CONTENT_SECURITY_POLICY);
  assert.match(policy, /default-src 'self'/);
  assert.match(policy, /script-src 'self'(;|$)/);
  assert.doesNotMatch(policy, /unsafe-inline|unsafe-eval|\*|https?:/);
  assert.equal(response.headers.get("x-content-type-options"), "nosniff");
  const html = await response.text();
  // No inline script or style, no event-handler attribute: the policy would block them anyway.
  assert.doesNotMatch(html, /<script(?![^>]*\bsrc=)[^>]*>/);
  assert.doesNotMatch(html, /<style|\sstyle=|\son[a-z]+=/i);
  assert.doesNotMatch(html, /https?:\/\//);
});

Deno.test("every file the page links to is served with its type; other names are 404", async () => {
  using h = httpHarness();
  const html = await (await h.handler(get("/"))).text();
  const linked = [...html.matchAll(/(?:src|href)="\/web\/([^"]+)"/g)].map((m) => m[1]);
  assert.deepEqual(linked.sort(), ["app.js", "style.css"]);
  assert.deepEqual([...WEB_FILES.keys()].filter((path) => path.startsWith("text/")).sort(), [
    "text/cost.js",
    "text/markdown.js",
    "text/title.js",
  ]);
  for (const [name, file] of WEB_FILES) {
    const response = await h.handler(get(`/${name}`));
    assert.equal(response.status, 200, name);
    assert.equal(response.headers.get("content-type"), file.type);
    assert.equal(response.headers.get("content-security-policy"), CONTENT_SECURITY_POLICY);
    const text = await response.text();
    // Every module the page imports is served too.
    for (const [, imported] of text.matchAll(/from "(\.{1,2}\/[\w./]+)"/g)) {
      const path = new URL(imported, `http://page/${name}`).pathname.slice(1);
      assert.ok(WEB_FILES.has(path), `${name} imports ${imported}`);
    }
  }
  for (
    const path of ["/web/missing.js", "/web/..%2Fmain.ts", "/web/index.html", "/text/app.js", "/web/title.js"]
  ) {
    const response = await h.handler(get(path));
    assert.equal(response.status, 404, path);
    await response.body?.cancel();
  }
  const head = await h.handler(get("/", "HEAD"));
  assert.equal(head.status, 200);
  assert.equal(head.body, null);
});

Deno.test("the page's scripts insert text only: no innerHTML, no eval, no string-built markup", () => {
  for (const [name, file] of WEB_FILES) {
    assert.doesNotMatch(
      file.body,
      /innerHTML|outerHTML|insertAdjacentHTML|document\.write|\beval\(|new Function/,
      name,
    );
  }
});

Deno.test("parseSseFrames() splits complete frames and keeps the unfinished rest", () => {
  const text = 'event: delta\ndata: {"text":"8"}\n\nevent: delta\ndata: {"text":"4"}\n\nevent: ans';
  const { frames, rest } = parseSseFrames(text);
  assert.deepEqual(frames, [{ event: "delta", data: { text: "8" } }, {
    event: "delta",
    data: { text: "4" },
  }]);
  assert.equal(rest, "event: ans");
});

Deno.test("completeDecisions() gives one decision per waiting call, and null while one is undecided", () => {
  const calls = [{ id: "a", name: "todo", arguments: "{}" }, { id: "b", name: "todo", arguments: "{}" }];
  assert.equal(completeDecisions(calls, new Map([["a", "deny"]])), null);
  assert.equal(completeDecisions(calls, new Map([["a", "deny"], ["c", "approve"]])), null);
  assert.deepEqual(
    completeDecisions(calls, new Map([["b", "approve"], ["a", "deny"], ["c", "approve"]])),
    { a: "deny", b: "approve" },
    "only the waiting calls are named",
  );
});

Deno.test("formatArguments() indents JSON arguments and leaves anything else as sent", () => {
  assert.equal(formatArguments('{"action":"add","text":"milk"}'), '{\n "action": "add",\n "text": "milk"\n}');
  assert.equal(formatArguments("{not json"), "{not json");
});

/** A run of `steps` model calls, each but the last calling two tools in one reply. */
function runEvents(steps: number): Record<string, unknown>[] {
  let ms = 0;
  const base = (event: string, step: number | null, data: Record<string, unknown>) => ({
    ts: new Date(Date.UTC(2026, 0, 1) + (ms += 10)).toISOString(),
    session_id: "s",
    run_id: "run-1",
    turn: 3,
    event,
    step,
    data,
  });
  const events = [base("run_start", null, { user_id: "u", message: "plan a trip" })];
  for (let step = 0; step < steps; step++) {
    const last = step === steps - 1;
    const usage = { prompt_tokens: 100 + step, completion_tokens: 5, total_tokens: 105 + step };
    events.push(
      base("llm_call", step, {
        model: "m",
        latency_ms: 8,
        ...usage,
        tool_call_count: last ? 0 : 2,
        retries: 0,
      }),
    );
    if (last) events.push(base("answer", step, { text: "done" }));
    else {
      for (const id of [`a${step}`, `b${step}`]) {
        events.push(base("tool_call", step, { id, name: "calculator", arguments: "{}" }));
      }
      events.push(
        base("tool_result", step, { id: `a${step}`, name: "calculator", ok: true, data: 1, error: null }),
      );
      events.push(
        base("tool_result", step, {
          id: `b${step}`,
          name: "calculator",
          ok: false,
          data: null,
          error: "bad",
        }),
      );
    }
  }
  const usage = { prompt_tokens: 900, completion_tokens: 40, total_tokens: 940 };
  events.push(base("run_end", null, { outcome: "answered", steps, tool_calls: (steps - 1) * 2, usage }));
  return events;
}

Deno.test("buildTimeline() lays out an 8-step run with two tool calls per reply on one time axis", () => {
  const events = runEvents(8);
  const timeline = buildTimeline(events as never);
  assert.equal(timeline.turn, 3);
  assert.equal(timeline.message, "plan a trip");
  assert.equal(timeline.outcome, "answered");
  assert.deepEqual([timeline.steps, timeline.toolCalls, timeline.tokens], [8, 14, 940]);
  const kinds = timeline.rows.map((r) => r.kind);
  assert.equal(kinds.filter((k) => k === "llm").length, 8);
  assert.equal(kinds.filter((k) => k === "tool").length, 14);
  assert.equal(kinds.at(-1), "answer");
  const llm = timeline.rows.find((r) => r.kind === "llm")!;
  assert.equal(llm.end - llm.start, 8);
  assert.match(llm.detail, /8 ms, 100 → 5 tokens, 2 tool call\(s\)/);
  const [first, second] = timeline.rows.filter((r) => r.step === 0 && r.kind === "tool");
  // Both calls of one reply start before either result: they overlap on the axis.
  assert.ok(first.start < second.end && second.start < first.end);
  assert.deepEqual([first.status, second.status], ["ok", "error"]);
  assert.match(second.detail, /error: bad/);
  for (const row of timeline.rows) {
    assert.ok(row.start >= 0 && row.end <= timeline.durationMs && row.start <= row.end);
  }
});

Deno.test("groupRuns() keeps each run's events together, runs in trace order", () => {
  const a = runEvents(1);
  const b = runEvents(2).map((e) => ({ ...e, run_id: "run-2" }));
  const runs = groupRuns([...a, ...b] as never);
  assert.deepEqual(runs.map((r) => [r[0].run_id, r.length]), [["run-1", a.length], ["run-2", b.length]]);
});
