/**
 * The summary call, the runtime's second probabilistic call: a dedicated prompt turns the old summary and
 * the messages being cut into `{goals, facts, todos, unresolved}` JSON. Also a deterministic summarizer (no
 * model) for tests and the offline demo. Both return raw text; the runtime validates and merges it.
 * @module
 */
import { type Summary, SUMMARY_FIELDS, type SummaryPatch } from "./summary.ts";
import { shorten } from "../shorten.ts";
import type { LLM } from "../llm/llm.ts";
import type { Message, ToolSchema, Usage } from "../types.ts";

/** What a summarizer is given. */
export interface SummaryRequest {
  /** The session's current summary, or null before the first compaction. */
  previous: Summary | null;
  /** The messages being cut, oldest first. */
  messages: readonly Message[];
  /** The rest of the session's request, which a model summarizer sends too (see {@linkcode SessionPrefix}). */
  session: SessionPrefix;
}

/**
 * The session's request around the cut messages, as its turns send it: a summary call that sends the same
 * bytes and asks at the end reads them from the provider's prompt cache, so a compaction costs no uncached
 * request of its own.
 */
export interface SessionPrefix {
  /** The system messages of its requests: the system prompt, the turn's blocks and the summary's block. */
  system: readonly Message[];
  /** The messages after the cut ones, which stay. */
  kept: readonly Message[];
  /** The tools its requests offer (the summary call may not call them). */
  tools: readonly ToolSchema[];
  /** Its requests' cache key (see `ChatOptions.cacheKey`). */
  cacheKey: string;
}

/** A summarizer's raw reply: text that should be the summary JSON, and the call's usage if any. */
export interface SummaryReply {
  text: string;
  usage: Usage | null;
}

/** Turns cut messages into summary JSON text. May reject (LLM error, timeout); the caller handles it. */
export type Summarizer = (request: SummaryRequest, signal?: AbortSignal) => Promise<SummaryReply>;

/**
 * How the summary request's last message begins: it follows the session's own messages, so it says that it
 * is the runtime's and what to return.
 */
export const SUMMARY_PROMPT =
  `[RUNTIME REQUEST] This message comes from the runtime, not from the user. Do not continue the conversation, call no tool, and ignore any response format asked for above: this reply is read by the runtime alone.
You maintain the long-term memory of the conversation above. Its oldest messages are about to be removed from it; the previous memory (JSON) and which messages go are given below.
Return ONLY a JSON object, no prose and no code fence, exactly of this shape:
{"goals": [...], "facts": [...], "todos": [...], "unresolved": [...]}
- goals: what the user is trying to achieve.
- facts: durable facts stated or established (names, numbers, preferences, decisions, tool results worth keeping).
- todos: open tasks the user asked for.
- unresolved: questions or problems not yet answered.
Each item is one short, self-contained English or original-language sentence of at most 160 characters.
List the most important and newest items first, at most 5 per field. Use [] for an empty field.
Only include what the removed messages or the previous memory support; never invent.`;

const QUOTE_CHARS = 80;

/** The summary request's last message: the prompt, the previous memory and which messages are removed. */
export function summaryAsk(
  previous: Summary | null,
  removed: readonly Message[],
  kept: readonly Message[],
): string {
  const fields = previous === null ? {} : Object.fromEntries(SUMMARY_FIELDS.map((f) => [f, previous[f]]));
  const turns = removed.filter((m) => m.role === "user").length;
  const next = kept.find((m) => m.role === "user")?.content;
  const which = next === undefined || next === null
    ? `all the messages of the conversation above (${turns} user turns).`
    : `the first ${removed.length} messages of the conversation above (${turns} user turns): everything ` +
      `before the user message that begins ${JSON.stringify(shorten(next, QUOTE_CHARS))}.`;
  return `${SUMMARY_PROMPT}\n\nPrevious memory:\n${
    JSON.stringify(fields)
  }\n\nMessages being removed: ${which}`;
}

/**
 * A summarizer that asks `llm`: the session's own request (its system messages, the removed and the kept
 * messages, its tools, which it may not call, and its cache key), then {@linkcode summaryAsk} as the last
 * user message.
 */
export function createLlmSummarizer(llm: LLM): Summarizer {
  return async ({ previous, messages, session }, signal) => {
    const ask: Message = { role: "user", content: summaryAsk(previous, messages, session.kept) };
    const request = [...session.system, ...messages, ...session.kept, ask];
    const { tools, cacheKey } = session;
    const reply = await llm.chat(request, { signal, tools, toolChoice: "none", cacheKey });
    return { text: reply.content ?? "", usage: reply.usage };
  };
}

function short(text: string): string {
  const flat = text.replace(/\s+/g, " ").trim();
  if (flat.length <= 160) return flat;
  // Never cut between the two halves of a surrogate pair.
  const end = /[\ud800-\udbff]/.test(flat[158]) ? 158 : 159;
  return `${flat.slice(0, end)}…`;
}

const GOAL = /^(i want|i'd like|i would like|my goal|help me|i need|i'm trying|i am trying)\b/i;

/**
 * A summarizer without a model, for tests and the offline demo: user statements become facts (goal-like
 * ones goals), added todos become todos, unanswered questions unresolved, calculator results facts. Newest
 * first. Deterministic; never rejects.
 */
export const deterministicSummarizer = (
  { messages }: Pick<SummaryRequest, "previous" | "messages">,
  _signal?: AbortSignal,
): Promise<SummaryReply> => {
  const patch: SummaryPatch = { goals: [], facts: [], todos: [], unresolved: [] };
  let question: string | null = null;
  for (const m of messages) {
    if (m.role === "user") {
      if (question !== null) patch.unresolved.unshift(short(question));
      const text = (m.content ?? "").trim();
      question = null;
      if (text.endsWith("?") || text.endsWith("？")) question = text;
      else if (GOAL.test(text)) patch.goals.unshift(short(text));
      else patch.facts.unshift(short(`User said: ${text}`));
    } else if (m.role === "assistant" && m.content && !m.toolCalls?.length) {
      question = null;
    } else if (m.role === "assistant") {
      for (const call of m.toolCalls ?? []) {
        if (call.name !== "todo") continue;
        try {
          const args = JSON.parse(call.arguments);
          if (args.action === "add" && typeof args.text === "string") patch.todos.unshift(short(args.text));
        } catch {
          // Invalid arguments were rejected by the registry; nothing to remember.
        }
      }
    } else if (m.role === "tool") {
      try {
        const result = JSON.parse(m.content ?? "");
        const data = result?.data;
        if (result?.ok && typeof data?.expression === "string" && typeof data?.result === "number") {
          patch.facts.unshift(short(`${data.expression} = ${data.result}`));
        }
      } catch {
        // A cut (truncated) result is not JSON; skip it.
      }
    }
  }
  if (question !== null) patch.unresolved.unshift(short(question));
  return Promise.resolve({ text: JSON.stringify(patch), usage: null });
};
