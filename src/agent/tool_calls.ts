/**
 * runToolCalls(): how a turn answers the tool calls of one model reply. The calls are stored before the first
 * runs and each result as its call ends, so a crash never forgets that a call started. Every call gets exactly
 * one result, in order. A call that must not run — malformed by the provider, beyond the per-reply limit,
 * with arguments over the size limit, or not yet started when the turn is stopped — is answered with a tool
 * error instead, so the model can correct itself. Never throws over a tool.
 * @module
 */
import { INVALID_TOOL_CALL_NAME } from "../llm/wire.ts";
import {
  failure,
  quotedToolName,
  serializeToolResult,
  type ToolContext,
  type ToolRegistry,
} from "../tools/registry.ts";
import type { RunEventData } from "../events.ts";
import { inSpan, toolSpan } from "../telemetry.ts";
import type { Message, ToolCall, TurnToolCall } from "../types.ts";

/** Largest tool-call `arguments` run or stored whole, in UTF-8 bytes (64 KiB). */
export const MAX_TOOL_ARGUMENT_BYTES = 65_536;

/** Characters of over-long arguments kept in the stored call, so the model can tell which call it was. */
const CUT_PREFIX_CHARS = 200;

/** Tool calls run per model reply unless the turn says otherwise (`Agent.maxToolCallsPerStep`). */
export const DEFAULT_MAX_TOOL_CALLS_PER_STEP = 16;

/** Options of {@linkcode runToolCalls}. */
export interface RunToolCallsOptions {
  /** Runs the calls. Required. */
  tools: ToolRegistry;
  /** What every handler learns about the call it serves. Required. */
  context: ToolContext;
  /**
   * Calls run from one reply; each later one is answered with a limit error.
   * @default {DEFAULT_MAX_TOOL_CALLS_PER_STEP}
   */
  maxCalls?: number;
  /**
   * Receives the data of the `tool_call` event before each call and of `tool_result` after it.
   * @default {() => {}}
   */
  emit?: <N extends "tool_call" | "tool_result">(name: N, data: RunEventData[N]) => void;
  /**
   * Why a well-formed call must not run (the approval policy or the user said no), or null when it may.
   * @default {() => null}
   */
  refuse?: (call: ToolCall) => string | null;
  /**
   * Stores the calls (as {@linkcode ToolCallsOutcome.calls} has them) before any runs; resolves to the stored
   * message's id, which with a call's id names the call to its handler (`ToolContext.callId`).
   * @default {async () => ""}
   */
  intent?: (calls: ToolCall[]) => Promise<string>;
  /** Stores one call's result message as soon as the call ends. @default {async () => {}} */
  result?: (message: Message) => Promise<void>;
}

/** What {@linkcode runToolCalls} did: what to store, and what to report. */
export interface ToolCallsOutcome {
  /**
   * The calls as the assistant message stores them, one per call in order: a placeholder name for a
   * nameless call, over-long arguments cut (see {@linkcode cutArguments}), no `problem`.
   */
  calls: ToolCall[];
  /** The calls as the turn's result reports them. */
  reported: TurnToolCall[];
}

function utf8Length(text: string): number {
  // A UTF-16 unit is at most 3 UTF-8 bytes: short texts need no encoding to be known under the limit.
  return text.length * 3 <= MAX_TOOL_ARGUMENT_BYTES ? text.length : new TextEncoder().encode(text).byteLength;
}

/**
 * The stored form of arguments over {@linkcode MAX_TOOL_ARGUMENT_BYTES}: the JSON text
 * `{"cut":true,"bytes":N,"prefix":"…"}`. It is valid JSON, as the next request must be: providers take
 * `arguments` as a JSON text and some parse it, so a raw prefix (broken JSON) could have the whole next
 * request rejected. It says plainly that the arguments were cut and how long they were, and keeps their
 * start so the model can tell which call it was.
 */
export function cutArguments(args: string, bytes: number): string {
  return JSON.stringify({ cut: true, bytes, prefix: args.slice(0, CUT_PREFIX_CHARS) });
}

/** The result of a call the turn was stopped before. */
export const NOT_STARTED_ERROR = "not run: the turn was stopped before this call started";

/** The key a handler knows a call by: its stored message's id and its own, unique across the session. */
export function callKey(messageId: string, callId: string): string {
  return `${messageId}/${callId}`;
}

/** The call as the assistant message stores it (see {@linkcode ToolCallsOutcome.calls}). */
function storedCall(call: ToolCall, bytes: number): ToolCall {
  return {
    id: call.id,
    name: call.name === "" ? INVALID_TOOL_CALL_NAME : call.name,
    arguments: bytes > MAX_TOOL_ARGUMENT_BYTES ? cutArguments(call.arguments, bytes) : call.arguments,
  };
}

/** Why `call` (number `index` of `count`) must not run, or null when it may. */
function refusal(
  call: ToolCall,
  index: number,
  count: number,
  maxCalls: number,
  bytes: number,
): string | null {
  const named = call.name !== "" && call.name !== INVALID_TOOL_CALL_NAME;
  const name = named ? call.name : INVALID_TOOL_CALL_NAME;
  if (call.problem !== undefined || !named) {
    const which = named ? `tool ${quotedToolName(name)}` : `tool call ${index + 1}`;
    return `Cannot run ${which}: ${call.problem ?? "it has no function name"}`;
  }
  if (index >= maxCalls) {
    return `Cannot run tool ${
      quotedToolName(name)
    }: this reply made ${count} tool calls and at most ${maxCalls} run per ` +
      `reply, so call ${index + 1} was not run; call it again in a later step if it is still needed`;
  }
  if (bytes > MAX_TOOL_ARGUMENT_BYTES) {
    return `Cannot run tool ${quotedToolName(name)}: its arguments are ${bytes} bytes, over the limit of ` +
      `${MAX_TOOL_ARGUMENT_BYTES}; send smaller arguments`;
  }
  return null;
}

/**
 * Answers every call of one reply, in order: stores them (`intent`), then runs the first `maxCalls` that are
 * well-formed and within the argument limit, gives every other one a tool error saying why, and stores each
 * result as it comes (`result`). Never throws over a tool (the registry catches handlers); rejects only if
 * `emit` or a store callback does.
 */
export async function runToolCalls(
  calls: readonly ToolCall[],
  options: RunToolCallsOptions,
): Promise<ToolCallsOutcome> {
  const { tools, context, maxCalls = DEFAULT_MAX_TOOL_CALLS_PER_STEP, emit = () => {} } = options;
  const { refuse = () => null, intent = () => Promise.resolve(""), result: store = async () => {} } = options;
  const sizes = calls.map((call) => utf8Length(call.arguments));
  const outcome: ToolCallsOutcome = {
    calls: calls.map((call, i) => storedCall(call, sizes[i])),
    reported: [],
  };
  const messageId = await intent(outcome.calls);
  for (const [index, call] of calls.entries()) {
    const stored = outcome.calls[index];
    emit("tool_call", { id: stored.id, name: stored.name, arguments: stored.arguments });
    const refused = refusal(call, index, calls.length, maxCalls, sizes[index]) ?? refuse(call) ??
      (context.signal?.aborted ? NOT_STARTED_ERROR : null);
    const callContext = { ...context, callId: callKey(messageId, stored.id) };
    const execute = async () =>
      refused === null ? await tools.execute(call, callContext) : tools.fit(failure(refused));
    const result = await inSpan(`execute_tool ${stored.name}`, execute, toolSpan(stored));
    emit("tool_result", { id: stored.id, name: stored.name, ...result });
    const message: Message = { role: "tool", content: serializeToolResult(result), toolCallId: stored.id };
    await store(message);
    outcome.reported.push({ name: stored.name, arguments: stored.arguments, ok: result.ok });
  }
  return outcome;
}
