/**
 * Fake thinking providers, one per dialect of provider state, behind an injected `fetch`: each answers by
 * rule (arithmetic gets `calculator` calls, a tool result an answer), sends its state with every reply,
 * streamed or whole, and refuses with a 400 in the provider's own words a later request where what it sent
 * does not come back, exactly, on the message or call it was sent with:
 * - `deepseek` and `kimi`: `reasoning_content` on every assistant message with `tool_calls`;
 * - `gemini`: `extra_content.google.thought_signature` on the first call of each reply (parallel calls: only
 *   the first has one, so a signature moved to another call is refused too);
 * - `openrouter`: `reasoning_details` (a text entry with its signature) on every assistant message with calls.
 * Every state carries {@linkcode THOUGHT}, which must reach no place but the store and this provider.
 */

/** In every reasoning text and signature: found anywhere else, provider state leaked. */
export const THOUGHT = "PRIVATE-THOUGHT";

export type Dialect = "deepseek" | "kimi" | "gemini" | "openrouter";
export const THINKING_DIALECTS: readonly Dialect[] = ["deepseek", "kimi", "gemini", "openrouter"];

/** What each provider says when its state does not come back. */
export const REFUSALS: Record<Dialect, string> = {
  deepseek: "The reasoning_content in the thinking mode must be passed back to the API.",
  kimi: "thinking is enabled but reasoning_content is missing in assistant tool call message",
  gemini: "Function call is missing a thought_signature in functionCall parts.",
  openrouter:
    "messages.1.content.0.type: Expected `thinking` or `redacted_thinking`, but found `tool_use`. " +
    "When `thinking` is enabled, a final `assistant` message must start with a thinking block.",
};

export interface ThinkingProvider {
  baseUrl: string;
  fetch: typeof globalThis.fetch;
  /** Every request body, parsed, in order (refused ones too). */
  requests: Record<string, unknown>[];
  /** The refusals it answered, in its words. */
  refused: string[];
}

type Wire = Record<string, unknown> & { role: string; content: string | null; tool_calls?: WireCall[] };
type WireCall = Record<string, unknown> & { id: string; function: { name: string; arguments: string } };

const EXPRESSION = /\d+\s*[-+*/]\s*\d+/g;
/** Numbers the providers a test starts, so that no two issue the same call id. */
let started = 0;

/** JSON with its keys sorted: the providers compare what comes back by value, not by key order. */
function canonical(value: unknown): string {
  return JSON.stringify(
    value ?? null,
    (_key, item) =>
      typeof item === "object" && item !== null && !Array.isArray(item)
        ? Object.fromEntries(Object.entries(item).sort(([a], [b]) => (a < b ? -1 : 1)))
        : item,
  );
}

/** A provider of `dialect` at `baseUrl` (one model: what it issued is known only to itself). */
export function thinkingProvider(
  dialect: Dialect,
  baseUrl = `https://${dialect}.example/v1`,
): ThinkingProvider {
  const requests: Record<string, unknown>[] = [];
  const refused: string[] = [];
  /** What each issued message (by its first call's id) and call (by its id) must come back with. */
  const issuedMessages = new Map<string, Record<string, unknown>>();
  const issuedCalls = new Map<string, Record<string, unknown>>();
  let replies = 0;
  const name = `p${++started}`;

  function refusal(messages: Wire[]): string | null {
    for (const message of messages) {
      if (message.role !== "assistant" || message.tool_calls === undefined) continue;
      const expected = issuedMessages.get(message.tool_calls[0].id);
      for (const [field, value] of Object.entries(expected ?? {})) {
        if (canonical(message[field]) !== canonical(value)) return REFUSALS[dialect];
      }
      for (const call of message.tool_calls) {
        const own = issuedCalls.get(call.id) ?? null;
        if (canonical(call.extra_content) !== canonical(own)) return REFUSALS[dialect];
      }
    }
    return null;
  }

  function state(n: number): Record<string, unknown> {
    const thought = `${THOUGHT} step ${n}: the user wants arithmetic`;
    if (dialect === "openrouter") {
      return {
        reasoning_details: [{
          type: "reasoning.text",
          text: thought,
          signature: `sig-${n}-${THOUGHT}`,
          format: "anthropic-claude-v1",
          index: 0,
        }],
      };
    }
    return dialect === "gemini" ? {} : { reasoning_content: thought };
  }

  function reply(messages: Wire[]): Wire {
    const n = ++replies;
    const last = messages.at(-1)!;
    if (last.role === "tool") {
      const result = JSON.parse(last.content ?? "{}");
      return { role: "assistant", content: `The answer is ${result.data?.result}.`, ...state(n) };
    }
    const expressions = (last.content ?? "").match(EXPRESSION) ?? [];
    if (expressions.length === 0) return { role: "assistant", content: `echo: ${last.content}`, ...state(n) };
    const calls: WireCall[] = expressions.map((expression, i) => ({
      id: `call_${name}_${n}_${i}`,
      type: "function",
      function: { name: "calculator", arguments: JSON.stringify({ expression }) },
    }));
    if (dialect === "gemini") {
      calls[0].extra_content = { google: { thought_signature: `sig-${n}-${THOUGHT}` } };
      issuedCalls.set(calls[0].id, calls[0].extra_content as Record<string, unknown>);
    }
    const own = state(n);
    issuedMessages.set(calls[0].id, own);
    return { role: "assistant", content: null, tool_calls: calls, ...own };
  }

  const fetch = (_input: string | URL | Request, init?: RequestInit): Promise<Response> =>
    Promise.resolve(answer(init));
  function answer(init?: RequestInit): Response {
    const body = JSON.parse(String(init?.body));
    requests.push(body);
    const why = refusal(body.messages);
    if (why !== null) {
      refused.push(why);
      const error = {
        message: why,
        type: "invalid_request_error",
        param: null,
        code: "invalid_request_error",
      };
      return Response.json({ error }, { status: 400 });
    }
    const message = reply(body.messages);
    const finish = message.tool_calls ? "tool_calls" : "stop";
    const usage = { prompt_tokens: 20, completion_tokens: 8, total_tokens: 28 };
    const base = { id: `chatcmpl-${replies}`, model: String(body.model) };
    if (body.stream !== true) {
      return Response.json({
        ...base,
        object: "chat.completion",
        choices: [{ index: 0, message, finish_reason: finish }],
        usage,
      });
    }
    const frames = chunks(message).map((delta, i, all) => ({
      ...base,
      object: "chat.completion.chunk",
      choices: [{ index: 0, delta, finish_reason: i === all.length - 1 ? finish : null }],
    }));
    const text =
      [...frames, { ...base, choices: [], usage }].map((f) => `data: ${JSON.stringify(f)}\n\n`).join("") +
      "data: [DONE]\n\n";
    return new Response(text, { headers: { "content-type": "text/event-stream" } });
  }
  return { baseUrl, fetch, requests, refused };
}

/** A message as stream deltas: its state in pieces (as the providers cut it), then its calls, then its text. */
function chunks(message: Wire): Record<string, unknown>[] {
  const deltas: Record<string, unknown>[] = [{ role: "assistant", content: "" }];
  const reasoning = message.reasoning_content;
  if (typeof reasoning === "string") {
    const half = Math.ceil(reasoning.length / 2);
    deltas.push({ reasoning_content: reasoning.slice(0, half) }, {
      reasoning_content: reasoning.slice(half),
    });
  }
  const details = message.reasoning_details as Record<string, unknown>[] | undefined;
  if (details !== undefined) {
    const { text, signature, ...entry } = details[0] as { text: string; signature: string };
    const half = Math.ceil(text.length / 2);
    deltas.push({
      reasoning: text.slice(0, half),
      reasoning_details: [{ ...entry, text: text.slice(0, half) }],
    });
    deltas.push({ reasoning: text.slice(half), reasoning_details: [{ ...entry, text: text.slice(half) }] });
    deltas.push({ reasoning_details: [{ ...entry, text: "", signature }] });
  }
  for (const [index, call] of (message.tool_calls ?? []).entries()) {
    const args = call.function.arguments;
    const half = Math.ceil(args.length / 2);
    const first: Record<string, unknown> = {
      index,
      id: call.id,
      type: "function",
      function: { name: call.function.name, arguments: args.slice(0, half) },
    };
    if (call.extra_content !== undefined) first.extra_content = call.extra_content;
    deltas.push({ tool_calls: [first] }, {
      tool_calls: [{ index, function: { arguments: args.slice(half) } }],
    });
  }
  for (const word of message.content?.match(/\S+\s*/g) ?? []) deltas.push({ content: word });
  return deltas;
}
