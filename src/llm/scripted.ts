/**
 * A deterministic model for tests: it replays a script of replies and records every request it was sent.
 * @module
 */
import { LlmError } from "../errors.ts";
import type { ChatReply, Message, ResponseFormat, ToolChoice, ToolSchema, Usage } from "../types.ts";
import type { ChatOptions, LLM } from "./llm.ts";

/** A reply as a script writes it; tool call ids and arguments may be left to the runtime to fill in. */
export interface ScriptedReply {
  content?: string | null;
  /** How the content streams to `onDelta`: pieces adding up to `content` (else one piece). */
  deltas?: string[];
  toolCalls?: { name: string; arguments?: string | Record<string, unknown>; id?: string }[];
  usage?: Usage | null;
  model?: string;
  /** The reply's `finishReason` (`"length"`, or `null` for a cut stream); absent unless the script sets it. */
  finishReason?: string | null;
}

/** One request the scripted model saw. */
export interface ScriptedRequest {
  messages: Message[];
  tools: readonly ToolSchema[];
  /** The `response_format` the request asked for, or null. */
  responseFormat: ResponseFormat | null;
  /** Whether the model may call the tools offered. */
  toolChoice: ToolChoice;
}

/** A step of the script: a reply, an error to throw, or a function of the request that returns a reply. */
export type ScriptStep =
  | ScriptedReply
  | Error
  | ((request: ScriptedRequest) => ScriptedReply | Promise<ScriptedReply>);

/** Replays `steps` in order, one per call. Running out of steps fails with a clear `LlmError`. */
export class ScriptedLLM implements LLM {
  #steps: ScriptStep[];
  #calls = 0;
  /** Every request received, in order, as a provider reads it (copies, so later changes do not show). */
  readonly requests: ScriptedRequest[] = [];

  constructor(steps: ScriptStep[]) {
    this.#steps = [...steps];
  }

  /** How many script steps have not been used yet. */
  get remaining(): number {
    return this.#steps.length - this.#calls;
  }

  async chat(messages: Message[], options: ChatOptions = {}): Promise<ChatReply> {
    const { tools = [], signal, responseFormat = null, toolChoice = "auto" } = options;
    // What a provider would read of each message: stored ids and timestamps are the runtime's own.
    const seen = messages.map(({ role, content, toolCalls, toolCallId }) => ({
      role,
      content,
      ...(toolCalls !== undefined && toolCalls.length > 0 ? { toolCalls } : {}),
      ...(toolCallId !== undefined ? { toolCallId } : {}),
    }));
    const request = structuredClone({ messages: seen, tools, responseFormat, toolChoice });
    this.requests.push(request);
    if (signal?.aborted) throw new LlmError("LLM request aborted", { kind: "aborted" });
    const index = this.#calls++;
    if (index >= this.#steps.length) {
      throw new LlmError(
        `Scripted model has no reply for request ${index + 1}: the script holds ${this.#steps.length}`,
        { kind: "script" },
      );
    }
    const step = this.#steps[index];
    if (step instanceof Error) throw step;
    const reply = typeof step === "function" ? await step(request) : step;
    // Aborted while a step function ran (a test moving time past a deadline): a provider's call would fail.
    if (signal?.aborted) throw new LlmError("LLM request aborted", { kind: "aborted" });
    const content = reply.content ?? null;
    if (options.onDelta !== undefined && content !== null && content !== "") {
      const pieces = reply.deltas ?? [content];
      if (pieces.join("") !== content) {
        throw new TypeError(`Scripted reply ${index + 1}: its deltas do not add up to its content`);
      }
      for (const piece of pieces) options.onDelta(piece);
    }
    return {
      content,
      toolCalls: (reply.toolCalls ?? []).map((call, i) => ({
        id: call.id ?? `call_${index + 1}_${i + 1}`,
        name: call.name,
        arguments: typeof call.arguments === "string" ? call.arguments : JSON.stringify(call.arguments ?? {}),
      })),
      usage: reply.usage ?? null,
      model: reply.model ?? "scripted",
      ...(reply.finishReason === undefined ? {} : { finishReason: reply.finishReason }),
    };
  }
}
