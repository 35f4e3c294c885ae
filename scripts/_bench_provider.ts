/**
 * The bench's fake OpenAI-compatible provider, run as its own process so its CPU time is not the runtime's:
 *
 * ```sh
 * deno run --allow-net=127.0.0.1 scripts/_bench_provider.ts --latency-ms 50
 * ```
 *
 * It listens on 127.0.0.1 (a free port) and prints the port as its first stdout line. It answers like a
 * provider, one non-streaming JSON completion with `usage` per request, by rule: the summary prompt gets a
 * valid summary JSON, a tool result gets a final answer quoting it, a user message with arithmetic gets a
 * `calculator` call, anything else an echo. Every answer waits `--latency-ms` first (default 0).
 * `GET /stats` returns the request counts by kind. It exits on SIGTERM, SIGINT, or when stdin closes.
 * @module
 */
import { parseArgs } from "node:util";
import { SUMMARY_PROMPT } from "../src/memory/summarizer.ts";

/** What `GET /stats` returns: requests answered, by kind, and the request bytes received. */
export interface ProviderStats {
  requests: number;
  tool_call: number;
  answer: number;
  summary: number;
  echo: number;
  errors: number;
  request_bytes: number;
}

interface WireMessage {
  role: string;
  content: string | null;
}

type Kind = "tool_call" | "answer" | "summary" | "echo";

const EXPRESSION = /[-+*/%().\d\s]*\d[-+*/%().\d\s]*[+*/%-][-+*/%().\d\s]*\d[)\s]*/;
const RESULT = /"result":(-?[\d.eE+-]+)/g;

/** The reply for a request body, and its kind. Pure. */
export function answer(body: Record<string, unknown>): { kind: Kind; message: Record<string, unknown> } {
  const messages = (Array.isArray(body.messages) ? body.messages : []) as WireMessage[];
  const last = messages.at(-1);
  if (messages[0]?.role === "system" && messages[0].content === SUMMARY_PROMPT) {
    // Remember the newest calculator result being cut, as a model would keep a tool result worth keeping.
    const results = [...(last?.content ?? "").matchAll(RESULT)];
    const fact = results.length > 0
      ? `The calculator returned ${results.at(-1)![1]}.`
      : "The user asked arithmetic questions.";
    const summary = { goals: [], facts: [fact], todos: [], unresolved: [] };
    return { kind: "summary", message: { role: "assistant", content: JSON.stringify(summary) } };
  }
  if (last?.role === "tool") {
    let text: string;
    try {
      const result = JSON.parse(last.content ?? "{}");
      text = result.ok ? `The answer is ${result.data.result}.` : `The tool failed: ${result.error}`;
    } catch {
      text = "The tool result was not readable.";
    }
    return { kind: "answer", message: { role: "assistant", content: text } };
  }
  const expression = EXPRESSION.exec(last?.content ?? "");
  if (expression !== null) {
    const call = {
      id: `call_${messages.length}`,
      type: "function",
      function: { name: "calculator", arguments: JSON.stringify({ expression: expression[0].trim() }) },
    };
    return { kind: "tool_call", message: { role: "assistant", content: null, tool_calls: [call] } };
  }
  return { kind: "echo", message: { role: "assistant", content: `echo: ${last?.content ?? ""}` } };
}

/** A chat.completion body carrying `message`, with usage estimated from the prompt's characters. Pure but for its id and clock. */
export function completion(model: string, message: Record<string, unknown>, promptChars: number) {
  const promptTokens = Math.ceil(promptChars / 4);
  const completionTokens = Math.ceil(JSON.stringify(message).length / 4);
  return {
    id: `chatcmpl-bench-${crypto.randomUUID()}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message, finish_reason: message.tool_calls ? "tool_calls" : "stop" }],
    usage: {
      prompt_tokens: promptTokens,
      completion_tokens: completionTokens,
      total_tokens: promptTokens + completionTokens,
    },
  };
}

function delay(ms: number): Promise<void> {
  return ms <= 0 ? Promise.resolve() : new Promise((resolve) => setTimeout(resolve, ms));
}

/** Starts the provider; resolves with its port. Runs until the process exits. */
function start(latencyMs: number): number {
  const stats: ProviderStats = {
    requests: 0,
    tool_call: 0,
    answer: 0,
    summary: 0,
    echo: 0,
    errors: 0,
    request_bytes: 0,
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
    const { pathname } = new URL(request.url);
    if (request.method === "GET" && pathname === "/stats") return Response.json(stats);
    if (request.method !== "POST" || !pathname.endsWith("/chat/completions")) {
      await request.body?.cancel();
      stats.errors++;
      return Response.json({ error: { message: `no route ${request.method} ${pathname}` } }, { status: 404 });
    }
    const text = await request.text();
    let body: Record<string, unknown>;
    try {
      body = JSON.parse(text);
    } catch {
      stats.errors++;
      return Response.json({ error: { message: "body is not JSON" } }, { status: 400 });
    }
    stats.requests++;
    stats.request_bytes += text.length;
    const { kind, message } = answer(body);
    stats[kind]++;
    await delay(latencyMs);
    return Response.json(completion(String(body.model), message, text.length));
  });
  return server.addr.port;
}

async function exitWhenStdinCloses(): Promise<void> {
  try {
    for await (const _ of Deno.stdin.readable) {
      // Input is ignored: only its end matters (the parent is gone or done).
    }
  } catch {
    // A broken stdin means the same as a closed one.
  }
  Deno.exit(0);
}

if (import.meta.main) {
  const { values } = parseArgs({
    args: Deno.args,
    options: { "latency-ms": { type: "string", default: "0" } },
  });
  const latencyMs = Number(values["latency-ms"]);
  if (!Number.isFinite(latencyMs) || latencyMs < 0) {
    console.error(`Invalid --latency-ms ${JSON.stringify(values["latency-ms"])}: expected a number >= 0`);
    Deno.exit(2);
  }
  for (const signal of ["SIGTERM", "SIGINT"] as const) Deno.addSignalListener(signal, () => Deno.exit(0));
  const port = start(latencyMs);
  console.log(String(port));
  exitWhenStdinCloses();
}
