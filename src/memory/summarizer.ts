/**
 * The summary call, the runtime's second probabilistic call: a dedicated prompt turns the old summary and
 * the messages being cut into `{goals, facts, todos, unresolved}` JSON. Also a deterministic summarizer (no
 * model) for tests and the offline demo. Both return raw text; the runtime validates and merges it.
 * @module
 */
import { type Summary, SUMMARY_FIELDS, type SummaryPatch } from "./summary.ts";
import { shorten } from "../shorten.ts";
import type { LLM } from "../llm/llm.ts";
import type { Message, Usage } from "../types.ts";

/** What a summarizer is given. */
export interface SummaryRequest {
  /** The session's current summary, or null before the first compaction. */
  previous: Summary | null;
  /** The messages being cut, oldest first. */
  messages: readonly Message[];
}

/** A summarizer's raw reply: text that should be the summary JSON, and the call's usage if any. */
export interface SummaryReply {
  text: string;
  usage: Usage | null;
}

/** Turns cut messages into summary JSON text. May reject (LLM error, timeout); the caller handles it. */
export type Summarizer = (request: SummaryRequest, signal?: AbortSignal) => Promise<SummaryReply>;

/** The summarizer's system prompt. */
export const SUMMARY_PROMPT =
  `You maintain the long-term memory of a conversation between a user and an assistant.
You receive the previous memory (JSON) and the oldest messages, which are about to be removed from the conversation.
Return ONLY a JSON object, no prose and no code fence, exactly of this shape:
{"goals": [...], "facts": [...], "todos": [...], "unresolved": [...]}
- goals: what the user is trying to achieve.
- facts: durable facts stated or established (names, numbers, preferences, decisions, tool results worth keeping).
- todos: open tasks the user asked for.
- unresolved: questions or problems not yet answered.
Each item is one short, self-contained English or original-language sentence of at most 160 characters.
List the most important and newest items first, at most 5 per field. Use [] for an empty field.
Only include what the messages or the previous memory support; never invent.`;

const MAX_TOOL_TEXT = 500;

/** The messages as a plain transcript, one line per message, tool output cut short. */
export function renderTranscript(messages: readonly Message[]): string {
  const lines: string[] = [];
  const names = new Map<string, string>();
  for (const m of messages) {
    if (m.role === "assistant" && m.toolCalls?.length) {
      for (const call of m.toolCalls) {
        names.set(call.id, call.name);
        lines.push(`[assistant calls ${call.name}] ${call.arguments}`);
      }
      if (m.content) lines.push(`[assistant] ${m.content}`);
    } else if (m.role === "tool") {
      const text = m.content ?? "";
      lines.push(`[tool ${names.get(m.toolCallId ?? "") ?? "result"}] ${shorten(text, MAX_TOOL_TEXT)}`);
    } else if (m.role !== "runtime" && m.role !== "system") {
      lines.push(`[${m.role}] ${m.content ?? ""}`);
    }
  }
  return lines.join("\n");
}

/** A summarizer that asks `llm` (with no tools) using {@linkcode SUMMARY_PROMPT}. */
export function createLlmSummarizer(llm: LLM): Summarizer {
  return async ({ previous, messages }, signal) => {
    const fields = previous === null ? {} : Object.fromEntries(SUMMARY_FIELDS.map((f) => [f, previous[f]]));
    const memory = JSON.stringify(fields);
    const reply = await llm.chat([
      { role: "system", content: SUMMARY_PROMPT },
      {
        role: "user",
        content: `Previous memory:\n${memory}\n\nMessages being removed:\n${renderTranscript(messages)}`,
      },
    ], { signal });
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
export const deterministicSummarizer: Summarizer = ({ messages }) => {
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
