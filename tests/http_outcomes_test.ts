/**
 * Every way a turn ends, driven through both APIs on a kept session: the sessions API
 * (`POST /v1/sessions/{id}/messages`) and the OpenAI-compatible route (`X-Session-Id`) answer it with the
 * same status and error code, JSON and streamed alike (the stream's last frame carries that error); and the
 * OpenAI-compatible route says the same text both ways: the answer's content, or the error's message. Each
 * runs with the rule model in process, then behind the real model client of each wire format (`LLM_API`),
 * the model streamed and whole.
 */
import assert from "node:assert/strict";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { LlmError } from "../src/errors.ts";
import { SessionLeases } from "../src/session/leases.ts";
import { SessionRunner } from "../src/session/runner.ts";
import { failSecondAppend, leaseStoreWith } from "./_harness.ts";
import { FakeClock } from "./_fake_clock.ts";
import { BUDGET_ANSWER } from "../src/agent/loop.ts";
import { type HttpHarness, httpHarness, parseSse, postMessage, until } from "./_http_harness.ts";
import { ruleProvider } from "./_rule_provider.ts";
import { LLM_APIS, type LlmApi } from "../src/types.ts";

type Api = "sessions" | "openai";

/** The request of `api` for `message` on session `session`, JSON or streamed. */
function request(api: Api, session: string, message: string, stream: boolean, format?: unknown): Request {
  const response_format = format === undefined ? {} : { response_format: format };
  if (api === "sessions") {
    return postMessage(
      session,
      { message, ...response_format },
      stream ? { accept: "text/event-stream" } : {},
    );
  }
  return new Request("http://agent.test/v1/chat/completions", {
    method: "POST",
    headers: { "content-type": "application/json", "x-session-id": session },
    body: JSON.stringify({
      model: "mini-agent",
      messages: [{ role: "user", content: message }],
      stream,
      ...response_format,
    }),
  });
}

/** The status the OpenAI route's error codes stand for (its stream's error frame carries no status). */
const OPENAI_STATUS: Record<string, number> = {
  llm_error: 502,
  invalid_output: 502,
  llm_timeout: 504,
  store_unavailable: 503,
  shutting_down: 503,
  session_lease_lost: 503,
  turn_timeout: 504,
};

const GONE = { status: 499, code: "client_closed_request" };

/**
 * What a client sees of a response: its status and error code. A stream answers 200; it ends with `[DONE]`
 * (sessions API: `run_end`) after an answer, else with an error frame that says the status JSON would have
 * had — or with neither when the client went away (nobody reads a frame then), seen here as the 499.
 */
async function seen(
  api: Api,
  response: Response,
  stream: boolean,
): Promise<{ status: number; code: string | null }> {
  const text = await response.text();
  if (response.status === 499) return GONE;
  if (!stream || response.status !== 200) {
    const body = JSON.parse(text);
    if (api === "openai") said.push(body.error?.message ?? body.choices[0].message.content);
    return { status: response.status, code: body.error?.code ?? null };
  }
  if (api === "sessions") {
    const last = parseSse(text).at(-1)!;
    if (last.event === "error") {
      const error = last.data.error as { code: string; status: number };
      return { status: error.status, code: error.code };
    }
    const outcome = (last.data.data as { outcome: string }).outcome;
    return outcome === "aborted" ? GONE : { status: 200, code: null };
  }
  const frames = text.split("\n\n").filter((f) => f !== "").map((f) => f.slice("data: ".length));
  const last = frames.at(-1)!;
  const chunks = frames.filter((f) => f !== "[DONE]").map((f) => JSON.parse(f));
  const error = chunks.at(-1)?.error;
  said.push(error?.message ?? chunks.map((c) => c.choices?.[0]?.delta?.content ?? "").join(""));
  if (last === "[DONE]") return { status: 200, code: null };
  return error === undefined ? GONE : { status: OPENAI_STATUS[error.code], code: error.code };
}

/** What the OpenAI-compatible route said, in the order of the calls of {@linkcode seen}. */
const said: string[] = [];

/** One way for a turn to end: how to set it up, what to ask, how to end it once it runs, what both APIs say. */
interface Outcome {
  name: string;
  message: string;
  /** The request's `response_format`. */
  format?: unknown;
  setup?: (h: HttpHarness) => void;
  /** Runs once the model was called, while it is held. */
  during?: (h: HttpHarness, client: AbortController) => void | Promise<void>;
  status: number;
  code: string | null;
  /** What the OpenAI-compatible route says, both ways, when the test names it. */
  says?: string;
  /** The deadline of a model client's attempt, in seconds, when the test needs a short one. @default {60} */
  modelTimeoutSeconds?: number;
}

const OUTCOMES: Outcome[] = [
  { name: "answered", message: "hello", status: 200, code: null },
  {
    name: "answered, with text written before a tool call",
    message: "what is 6*7?",
    setup: (h) => (h.llm.preamble = "Let me work that out."),
    status: 200,
    code: null,
    says: "Let me work that out.\n\nThe answer is 42.",
  },
  {
    name: "max_steps",
    message: "what is 1+1?",
    setup: (h) => (h.deps.agent.maxSteps = 1),
    status: 200,
    code: null,
  },
  {
    name: "budget",
    message: "hello",
    setup: (h) => (h.deps.agent.maxTurnTokens = 1),
    status: 200,
    code: null,
    says: BUDGET_ANSWER,
  },
  {
    name: "timeout",
    message: "hello",
    setup: (h) => {
      h.deps.agent.turnTimeoutSeconds = 30;
      h.deps.agent.clock = new FakeClock();
      h.llm.hold = true;
    },
    during: (h) => (h.deps.agent.clock as FakeClock).advance(30_000),
    status: 504,
    code: "turn_timeout",
  },
  {
    name: "awaiting_approval",
    message: "what is 2+2?",
    setup: (h) => (h.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } })),
    status: 200,
    code: null,
  },
  {
    name: "invalid_output: the answer is not JSON, even after a repair request",
    message: "hello",
    format: { type: "json_object" },
    status: 502,
    code: "invalid_output",
  },
  {
    name: "error: the model failed",
    message: "hello",
    setup: (h) => (h.llm.fail = new LlmError("LLM request failed: HTTP 500", { kind: "http", status: 500 })),
    status: 502,
    code: "llm_error",
  },
  {
    name: "error: the model timed out",
    message: "hello",
    setup: (h) => (h.llm.fail = new LlmError("LLM request timed out after 60s", { kind: "timeout" })),
    // Behind a wire, the reply never comes: the client's own deadline ends the attempt.
    modelTimeoutSeconds: 0.05,
    status: 504,
    code: "llm_timeout",
  },
  {
    name: "error: the session database went away",
    message: "what is 3+3?",
    setup: (h) => failSecondAppend(h.store),
    status: 503,
    code: "store_unavailable",
  },
  {
    name: "aborted: the shutdown's grace period ended",
    message: "hello",
    setup: (h) => (h.llm.hold = true),
    during: (h) => h.shutdown.abort(),
    status: 503,
    code: "shutting_down",
  },
  {
    name: "aborted: the client went away",
    message: "hello",
    setup: (h) => (h.llm.hold = true),
    during: (_h, client) => client.abort(),
    status: 499,
    code: "client_closed_request",
  },
  {
    name: "aborted: the lease was lost",
    message: "hello",
    setup: (h) => {
      const leaky = leaseStoreWith(h.store, { renewLease: () => Promise.resolve(false) });
      h.deps.sessions = new SessionRunner({
        leases: new SessionLeases(leaky, { owner: "here", ttlMs: 30, minPollMs: 5, maxPollMs: 10 }),
      });
      h.llm.hold = true;
    },
    status: 503,
    code: "session_lease_lost",
  },
];

/** The model of a run: the rule model itself, or the rule model behind the wire of an `LLM_API`, streamed or whole. */
type Wire = { api: LlmApi; stream: boolean } | null;

for (
  const wires of [
    [null],
    ...LLM_APIS.map((api) => [{ api, stream: false }, { api, stream: true }]),
  ] as Wire[][]
) {
  const via = wires[0] === null ? "" : `LLM_API=${wires[0].api} (the model streamed and whole): `;
  for (const outcome of OUTCOMES) {
    Deno.test(`${via}both APIs answer a turn that ends "${outcome.name}" with ${outcome.status}, JSON and streamed`, async () => {
      for (const wire of wires) {
        const answers: Record<string, { status: number; code: string | null }> = {};
        said.length = 0;
        for (const api of ["sessions", "openai"] as const) {
          for (const stream of [false, true]) {
            using h = httpHarness();
            const provider = wire === null ? null : ruleProvider(h.llm);
            try {
              outcome.setup?.(h);
              if (wire !== null) {
                h.deps.agent.llm = provider!.model(wire.api, wire.stream, outcome.modelTimeoutSeconds);
              }
              const client = new AbortController();
              const sent = request(api, `${api}-session`, outcome.message, stream, outcome.format);
              const response = h.handler(new Request(sent, { signal: client.signal }));
              if (outcome.during !== undefined) {
                await until(() => h.llm.calls === 1, "the model call");
                await outcome.during(h, client);
              }
              // Every held model call ends by an abort: read to the end first, let go of nothing before.
              answers[`${api} ${stream ? "stream" : "json"}`] = await seen(api, await response, stream);
              h.llm.release();
            } finally {
              await provider?.close();
            }
          }
        }
        const expected = { status: outcome.status, code: outcome.code };
        const model = wire === null ? "" : ` (the model ${wire.stream ? "streamed" : "whole"})`;
        assert.deepEqual(answers, {
          "sessions json": expected,
          "sessions stream": expected,
          "openai json": expected,
          "openai stream": expected,
        }, model);
        if (outcome.status === 499) continue; // nobody reads what a gone client would have been told
        // Each request ran its own run (and provider): its id (and port) in a message is the one difference.
        const [json, streamed] = said.map((text) =>
          text.replace(/run [\w:-]+\)/g, "run …)").replace(/127\.0\.0\.1:\d+/g, "127.0.0.1:…")
        );
        assert.notEqual(json, "");
        assert.equal(streamed, json, model);
        if (outcome.says !== undefined) assert.equal(json, outcome.says, model);
      }
    });
  }
}
