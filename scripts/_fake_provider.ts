/**
 * The fake provider of the bench and the crash test, on 127.0.0.1, answering by rule like a tiny model, in
 * each of the three wire formats (Chat Completions, Messages, Responses: see `_fake_wires.ts`). The crash test's {@linkcode startCrashProvider} adds seeded delays, streaming and awaited
 * moments; the bench runs this file as a process: `deno run --allow-net=127.0.0.1 scripts/_fake_provider.ts
 * [LATENCY_MS]` prints its port, answers by {@linkcode answer} after LATENCY_MS, counts requests by kind at
 * `GET /stats`, and exits on SIGTERM, SIGINT, or when stdin closes.
 * @module
 */
import { SUMMARY_PROMPT } from "../src/memory/summarizer.ts";
import {
  type Api,
  API_PATHS,
  type RuleMessage,
  ruleMessages,
  streamedReply,
  wholeReply,
} from "./_fake_wires.ts";

type WireMessage = RuleMessage;

/** Resolves after `ms` milliseconds. */
export function delay(ms: number): Promise<void> {
  return new Promise((resolve) => setTimeout(resolve, ms));
}

type Kind = "tool_call" | "answer" | "summary" | "echo";

const BENCH_EXPRESSION = /[-+*/%().\d\s]*\d[-+*/%().\d\s]*[+*/%-][-+*/%().\d\s]*\d[)\s]*/;
const RESULT = /"result":(-?[\d.eE+-]+)/g;

/** The bench's reply to a request body (summary, answer to a tool result, calculator call, echo). Pure. */
export function answer(body: Record<string, unknown>): { kind: Kind; message: Record<string, unknown> } {
  const messages = (Array.isArray(body.messages) ? body.messages : []) as WireMessage[];
  const last = messages.at(-1);
  const removed = removedMessages(messages);
  if (removed !== null) {
    // Keep the newest calculator result being cut, as a model would keep a result worth keeping.
    const cutResults = removed.filter((m) => m.role === "tool").map((m) => m.content ?? "").join("\n");
    const results = [...cutResults.matchAll(RESULT)];
    const fact = results.length > 0
      ? `The calculator returned ${results.at(-1)![1]}.`
      : "The user asked arithmetic questions.";
    const summary = { goals: [], facts: [fact], todos: [], unresolved: [] };
    return { kind: "summary", message: { role: "assistant", content: JSON.stringify(summary) } };
  }
  if (last?.role === "tool") {
    let text = "The tool result was not readable.";
    try {
      const result = JSON.parse(last.content ?? "{}");
      text = result.ok ? `The answer is ${result.data.result}.` : `The tool failed: ${result.error}`;
    } catch {
      // The default text says so.
    }
    return { kind: "answer", message: { role: "assistant", content: text } };
  }
  const expression = BENCH_EXPRESSION.exec(last?.content ?? "");
  if (expression !== null) {
    const args = JSON.stringify({ expression: expression[0].trim() });
    const call = {
      id: `call_${messages.length}`,
      type: "function",
      function: { name: "calculator", arguments: args },
    };
    return { kind: "tool_call", message: { role: "assistant", content: null, tool_calls: [call] } };
  }
  return { kind: "echo", message: { role: "assistant", content: `echo: ${last?.content ?? ""}` } };
}

/** A chat.completion body carrying `message`, usage estimated from the prompt's characters. */
export function completion(model: string, message: Record<string, unknown>, promptChars: number) {
  const prompt = Math.ceil(promptChars / 4);
  const reply = Math.ceil(JSON.stringify(message).length / 4);
  return {
    id: `chatcmpl-bench-${crypto.randomUUID()}`,
    object: "chat.completion",
    created: Math.floor(Date.now() / 1000),
    model,
    choices: [{ index: 0, message, finish_reason: message.tool_calls ? "tool_calls" : "stop" }],
    usage: { prompt_tokens: prompt, completion_tokens: reply, total_tokens: prompt + reply },
  };
}

/** A seeded PRNG (mulberry32): numbers in [0, 1), the same sequence for the same seed. */
export function createRng(seed: number): () => number {
  let state = seed >>> 0;
  return function next(): number {
    state = (state + 0x6d2b79f5) >>> 0;
    let t = state;
    t = Math.imul(t ^ (t >>> 15), t | 1);
    t ^= t + Math.imul(t ^ (t >>> 7), t | 61);
    return ((t ^ (t >>> 14)) >>> 0) / 4294967296;
  };
}

/** What a request asks for: a compaction summary, a reply to a user message, a reply to tool results. */
export type RequestKind = "summary" | "chat" | "tool_results";
/** What a reply carries. */
export type ReplyKind = "summary" | "tool_calls" | "answer";
/** One tool call of a reply. */
export type WireCall = { id: string; name: string; arguments: string };

/** A moment of an exchange: body read (before the delay), reply about to go, reply handed over. */
export type ProviderMoment =
  | { kind: "request"; request: RequestKind; index: number; stream: boolean }
  | { kind: "reply" | "sent"; reply: ReplyKind; index: number; calls: WireCall[] };

/** Options of {@linkcode startCrashProvider}. */
export interface CrashProviderOptions {
  /** Seed of the delays and of the rule-based choices (second calls, extra todo calls). @default {1} */
  seed?: number;
  /** Longest random delay before a reply, in milliseconds. @default {40} */
  maxDelayMs?: number;
  /** Told of every moment and awaited; may still be told after a client was killed. @default {() => {}} */
  onMoment?: (moment: ProviderMoment) => void | Promise<void>;
}

/** The running provider. */
export interface CrashProvider {
  /** The base URL for `OPENAI_BASE_URL`; without its `/v1`, `ANTHROPIC_BASE_URL`. */
  url: string;
  /** Summary replies sent (some perhaps to a client already killed), requests by wire format. */
  stats: { summaries: number; requests: Record<Api, number> };
  /** Resolves when no exchange is in progress (a killed client's last reply has been dropped). */
  idle(): Promise<void>;
  /** Stops the server; resolves once it is closed. */
  close(): Promise<void>;
}

type Decision = { kind: ReplyKind; content: string | null; calls: WireCall[] };

const EXPRESSION = /[(\d][\d\s+\-*/%().]*[\d)]/g;

/**
 * The messages a summary request removes, or null for another request: one whose last message is the
 * summarizer's ask, which says how many messages go or quotes the user message the kept ones start with.
 */
export function removedMessages(messages: readonly WireMessage[]): WireMessage[] | null {
  const ask = messages.at(-1);
  if (ask?.role !== "user" || !ask.content?.startsWith(SUMMARY_PROMPT)) return null;
  const conversation = messages.slice(0, -1).filter((m) => m.role !== "system");
  const quoted = /everything before the user message that begins (".*")\.$/.exec(ask.content);
  if (quoted === null) return conversation;
  const start = (JSON.parse(quoted[1]) as string).replace(/…$/, "");
  const kept = conversation.findIndex((m) => m.role === "user" && (m.content ?? "").startsWith(start));
  return kept < 0 ? conversation : conversation.slice(0, kept);
}

function requestKind(messages: readonly WireMessage[]): RequestKind {
  if (removedMessages(messages) !== null) return "summary";
  return messages.at(-1)?.role === "tool" ? "tool_results" : "chat";
}

function short(text: string): string {
  return text.length <= 150 ? text : `${text.slice(0, 149)}…`;
}

/** Rule-based replies; `rng` drives the optional extra calls. Call ids and todo texts are numbered. */
class Rules {
  #rng: () => number;
  #calls = 0;
  #todos = 0;
  #prefix: string;

  constructor(seed: number, rng: () => number) {
    this.#prefix = `call_${seed}_`;
    this.#rng = rng;
  }

  decide(kind: RequestKind, messages: readonly WireMessage[]): Decision {
    if (kind === "summary") {
      return { kind, content: this.#summary(removedMessages(messages) ?? []), calls: [] };
    }
    if (kind === "tool_results") return { kind: "answer", content: this.#results(messages), calls: [] };
    const text = messages.at(-1)?.content ?? "";
    const calls: WireCall[] = [];
    const todo = /add a todo:\s*(.+)$/i.exec(text);
    const expressions = (text.match(EXPRESSION) ?? []).map((e) => e.trim()).filter((e) => /[-+*/%]/.test(e));
    if (todo !== null) {
      calls.push(this.#todoCall(todo[1].trim()));
    } else if (expressions.length > 0) {
      for (const expression of expressions.slice(0, 2)) calls.push(this.#call("calculator", { expression }));
      if (calls.length === 1 && this.#rng() < 0.5) {
        calls.push(this.#call("calculator", { expression: `(${expressions[0]})*2` }));
      }
      if (this.#rng() < 0.3) calls.push(this.#todoCall(`check ${expressions[0]}`));
    }
    if (calls.length > 0) return { kind: "tool_calls", content: null, calls };
    return { kind: "answer", content: this.#chat(text, messages), calls };
  }

  #call(name: string, args: Record<string, unknown>): WireCall {
    return { id: `${this.#prefix}${++this.#calls}`, name, arguments: JSON.stringify(args) };
  }

  // Todo texts are unique, so the crash test can tell which todo's result was stored.
  #todoCall(text: string): WireCall {
    return this.#call("todo", { action: "add", text: `${text} #${++this.#todos}` });
  }

  #summary(removed: readonly WireMessage[]): string {
    const users = removed.filter((m) => m.role === "user").map((m) => m.content ?? "");
    const facts = users.slice(-2).reverse().map((u) => short(`User said: ${u}`));
    const todos: string[] = [];
    for (const call of removed.flatMap((m) => m.calls ?? []).filter((c) => c.name === "todo")) {
      try {
        const { text } = JSON.parse(call.arguments);
        if (typeof text === "string") todos.unshift(short(text));
      } catch {
        // Not JSON: nothing to remember.
      }
    }
    const goals = this.#rng() < 0.3 ? ["Get arithmetic checked with the calculator"] : [];
    return JSON.stringify({
      goals,
      facts: facts.length > 0 ? facts : ["Nothing new was said"],
      todos: todos.slice(0, 2),
      unresolved: [],
    });
  }

  #results(messages: readonly WireMessage[]): string {
    const parts: string[] = [];
    for (let i = messages.length - 1; i >= 0 && messages[i].role === "tool"; i--) {
      let result;
      try {
        result = JSON.parse(messages[i].content ?? "");
      } catch {
        parts.unshift("a result I could not read");
        continue;
      }
      const data = result?.data;
      if (!result?.ok) parts.unshift(`a tool failed: ${result?.error}`);
      else if (typeof data?.result === "number") parts.unshift(`${data.expression} = ${data.result}`);
      else if (data?.todo) parts.unshift(`added todo ${data.todo.id}: ${data.todo.text}`);
      else parts.unshift("done");
    }
    return `${parts.join("; ")}.`;
  }

  #chat(text: string, messages: readonly WireMessage[]): string {
    const said = /my name is (\w+)/i.exec(text);
    if (said !== null) return `Nice to meet you, ${said[1]}.`;
    if (/what is my name/i.test(text)) {
      const known = messages.map((m) => /my name is (\w+)/i.exec(m.content ?? "")).findLast((m) =>
        m !== null
      );
      return known ? `Your name is ${known[1]}.` : "I do not know your name yet.";
    }
    return `Noted: ${short(text)}`;
  }
}

/** Starts the provider on an ephemeral loopback port. */
export function startCrashProvider(options: CrashProviderOptions = {}): CrashProvider {
  const { seed = 1, maxDelayMs = 40, onMoment = () => {} } = options;
  if (!Number.isInteger(seed)) {
    throw new TypeError(`Cannot start the provider: seed must be an integer, got ${seed}`);
  }
  if (!(maxDelayMs >= 0)) {
    throw new RangeError(`Cannot start the provider: maxDelayMs must be >= 0, got ${maxDelayMs}`);
  }
  const rng = createRng(seed);
  const rules = new Rules(seed, rng);
  const stats = { summaries: 0, requests: { chat: 0, anthropic: 0, responses: 0 } };
  let requests = 0;
  const encoder = new TextEncoder();
  let busy = 0;
  let waiters: (() => void)[] = [];
  const release = () => {
    if (--busy > 0) return;
    for (const wake of waiters) wake();
    waiters = [];
  };

  async function exchange(request: Request, api: Api): Promise<Response> {
    const body = await request.json();
    const index = requests++;
    stats.requests[api]++;
    const messages = ruleMessages(api, body) as WireMessage[];
    const stream = body.stream === true;
    const kind = requestKind(messages);
    await onMoment({ kind: "request", request: kind, index, stream });
    const decision = rules.decide(kind, messages);
    await delay(Math.floor(rng() * (maxDelayMs + 1)));
    // Aborted only when the runtime notices the client left; often it does not (see onMoment).
    const gone = () => request.signal.aborted;
    if (gone()) return new Response(null, { status: 499 });
    const moment = { reply: decision.kind, index, calls: decision.calls };
    await onMoment({ kind: "reply", ...moment });
    if (gone()) return new Response(null, { status: 499 });
    if (decision.kind === "summary") stats.summaries++;
    const model = String(body.model);
    const usage = { input: 20, output: 8, read: 0, written: 0 };
    const whole = wholeReply(api, model, decision, usage, `crash${index}`);
    const text = stream ? streamedReply(api, whole) : [JSON.stringify(whole)];
    // A stream goes out in up to three pieces with short gaps, so a kill can land mid-reply.
    const [a, b] = [Math.floor(rng() * text.length), Math.floor(rng() * text.length)].sort((x, y) => x - y);
    const pieces = (stream ? [text.slice(0, a), text.slice(a, b), text.slice(b)] : [text])
      .map((p) => p.join("")).filter((p) => p !== "");
    let cancelled = false;
    busy++;
    const out = new ReadableStream<Uint8Array>({
      async start(controller) {
        try {
          for (const [i, piece] of pieces.entries()) {
            if (i > 0) await delay(Math.floor(rng() * 4));
            if (cancelled || gone()) return;
            controller.enqueue(encoder.encode(piece));
          }
          controller.close();
          if (!cancelled && !gone()) await onMoment({ kind: "sent", ...moment });
        } catch {
          // The client went away mid-reply (it was killed): nothing to deliver.
        } finally {
          release();
        }
      },
      cancel() {
        cancelled = true;
      },
    });
    const type = stream ? "text/event-stream" : "application/json";
    return new Response(out, { headers: { "content-type": type } });
  }

  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
    const url = new URL(request.url);
    const api = (Object.keys(API_PATHS) as Api[]).find((name) => API_PATHS[name] === url.pathname);
    if (request.method !== "POST" || api === undefined) {
      await request.body?.cancel();
      return Response.json({ error: { message: "not found" } }, { status: 404 });
    }
    busy++;
    try {
      return await exchange(request, api);
    } catch (error) {
      return Response.json({ error: { message: String(error) } }, { status: 500 });
    } finally {
      release();
    }
  });

  return {
    url: `http://127.0.0.1:${server.addr.port}/v1`,
    stats,
    idle: () => busy === 0 ? Promise.resolve() : new Promise<void>((resolve) => waiters.push(resolve)),
    close: () => server.shutdown(),
  };
}

if (import.meta.main) {
  const latencyMs = Number(Deno.args[0] ?? 0);
  const stats: Record<Kind | "requests", number> = {
    requests: 0,
    tool_call: 0,
    answer: 0,
    summary: 0,
    echo: 0,
  };
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
    if (request.method === "GET") return Response.json(stats);
    const text = await request.text();
    const body = JSON.parse(text);
    const { kind, message } = answer(body);
    stats.requests++;
    stats[kind]++;
    if (latencyMs > 0) await delay(latencyMs);
    return Response.json(completion(String(body.model), message, text.length));
  });
  for (const signal of ["SIGTERM", "SIGINT"] as const) Deno.addSignalListener(signal, () => Deno.exit(0));
  console.log(String(server.addr.port));
  // Input is ignored: only its end matters (the parent is gone or done).
  await Deno.stdin.readable.pipeTo(new WritableStream()).catch(() => {});
  Deno.exit(0);
}
