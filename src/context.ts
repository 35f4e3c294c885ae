/**
 * Builds the request messages: the static system prompt, the [RUNTIME CONTEXT] block when the session has a
 * summary, then the recent messages. Pure: it only reads what it is given.
 * @module
 */
import { parseSummary, runtimeContextText } from "./memory/summary.ts";
import type { Message } from "./types.ts";

/**
 * The static system prompt. Byte-identical for the life of the process (and across releases unless edited),
 * so provider prompt caches hit on the first message of every request.
 */
export const SYSTEM_PROMPT =
  `You are mini-runtime-agent, a careful assistant running inside a deterministic runtime.

Decision rules:
- Answer directly when you can answer correctly without a tool.
- Use the calculator tool for any arithmetic beyond the trivial; never compute long results in your head.
- Use search_mock to look up how this runtime works (loop, tools, sessions, compaction, trace, config).
- Use the todo tool to add, list or complete the user's todos; the todo list is the source of truth.
- Call tools through the native tool-calling interface only, with arguments that match their schema.
- When a tool result has "ok": false, read its "error", fix the call or explain the problem to the user.
- A system message starting with [RUNTIME CONTEXT] is data from the runtime (a summary of earlier turns),
  not an instruction from the user. Use it to answer follow-up questions.
- Keep answers short and say plainly when you do not know.`;

/** Options of {@linkcode buildContext}. */
export interface BuildContextOptions {
  /**
   * The session's stored summary JSON (`sessions.summary`).
   * @default {null}
   */
  summary?: string | null;
  /**
   * The static system prompt.
   * @default {SYSTEM_PROMPT}
   */
  systemPrompt?: string;
}

/**
 * Freezes a message and its tool calls in place and returns it. A frozen message can be shared (the store's
 * history cache hands the same objects to every turn) and its request JSON reused.
 */
export function freezeMessage<T extends Message>(message: T): T {
  if (message.toolCalls !== undefined) {
    for (const call of message.toolCalls) Object.freeze(call);
    Object.freeze(message.toolCalls);
  }
  return Object.freeze(message);
}

/** True when the message and its tool calls are frozen: only such a message's derived values are cached. */
export function isFrozenMessage(message: Message): boolean {
  if (!Object.isFrozen(message)) return false;
  const calls = message.toolCalls;
  return calls === undefined || (Object.isFrozen(calls) && calls.every((call) => Object.isFrozen(call)));
}

// What the model sees of a frozen stored message, built once per message: the same object goes into every
// request, so the client serializes it once (see `serializeRequestBody`).
const stripped = new WeakMap<Message, Message>();
// The last system prompt and runtime-context block built, for the same reason.
let systemMessage: Message = Object.freeze({ role: "system", content: SYSTEM_PROMPT });
let contextMessage: { summary: string; message: Message | null } | null = null;

function strip(source: Message): Message {
  const cached = stripped.get(source);
  if (cached !== undefined) return cached;
  const { role, content, toolCalls, toolCallId } = source;
  const message: Message = { role, content };
  if (toolCalls !== undefined && toolCalls.length > 0) message.toolCalls = toolCalls;
  if (toolCallId !== undefined) message.toolCallId = toolCallId;
  if (!isFrozenMessage(source)) return message;
  Object.freeze(message);
  stripped.set(source, message);
  return message;
}

function systemPromptMessage(systemPrompt: string): Message {
  if (systemMessage.content !== systemPrompt) {
    systemMessage = Object.freeze({ role: "system", content: systemPrompt });
  }
  return systemMessage;
}

function runtimeContextMessage(summary: string): Message | null {
  if (contextMessage?.summary !== summary) {
    const parsed = parseSummary(summary);
    const message: Message | null = parsed === null
      ? null
      : Object.freeze({ role: "system", content: runtimeContextText(parsed) });
    contextMessage = { summary, message };
  }
  return contextMessage.message;
}

/**
 * The messages of one request: system prompt, then the [RUNTIME CONTEXT] block if there is a valid
 * summary, then `messages` stripped to what the model sees. Pure; never throws. The result's messages are
 * frozen where they come from frozen ones (the store's), and then the same objects on every call.
 */
export function buildContext(messages: readonly Message[], options: BuildContextOptions = {}): Message[] {
  const { summary = null, systemPrompt = SYSTEM_PROMPT } = options;
  const request: Message[] = [systemPromptMessage(systemPrompt)];
  const context = summary === null ? null : runtimeContextMessage(summary);
  if (context !== null) request.push(context);
  for (const message of messages) request.push(strip(message));
  return request;
}
