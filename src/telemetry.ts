/**
 * OpenTelemetry spans for the runtime's own work, named and attributed after the GenAI semantic conventions:
 * `invoke_agent mini-agent` per turn, `chat <model>` per model call, `execute_tool <name>` per tool call and
 * `compaction` for a compaction's summary call. Deno exports them itself when `OTEL_DENO=true`, with its own
 * `Deno.serve` and `fetch` spans nested around and under them.
 *
 * Until {@linkcode enableTelemetry} succeeds every helper is a no-op and `npm:@opentelemetry/api` is never
 * loaded, so `chat`, `serve` and `demo` need nothing from a registry while telemetry is off. Spans carry ids,
 * names, counts and outcomes; never message content, tool arguments or results, error texts or a key: the
 * trace file is the audit log, and its `run_id` is on every turn's span.
 * @module
 */
import type * as OtelApi from "npm:@opentelemetry/api@1.9.0";
import { LlmError } from "./errors.ts";
import type { ChatReply, ModelInfo, ToolCall, ToolResult, TurnResult, UsageEntry } from "./types.ts";

/**
 * The API package, pinned. Imported through a variable: Deno tries to download a string-literal dynamic
 * import at start-up even when it never runs, which would print "Download" with telemetry off.
 */
const API_SPECIFIER = "npm:@opentelemetry/api@1.9.0";

/** The variables telemetry reads besides the settings: Deno's switch (the exporter reads its own). */
export const TELEMETRY_VARIABLES: readonly string[] = ["OTEL_DENO"];

/** The agent's name in span names and `gen_ai.agent.name`. */
export const AGENT_NAME = "mini-agent";

/** A span attribute; `null` and `undefined` are left out. */
export type SpanAttributeValue = string | number | boolean | readonly string[] | null | undefined;

/** Span attributes by name. */
export type SpanAttributes = Record<string, SpanAttributeValue>;

/** How a span ends, decided from its function's value. */
export interface SpanEnd {
  /** Set before the span ends. @default {{}} */
  attributes?: SpanAttributes;
  /** Marks the span failed (status ERROR) with this `error.type`. @default {undefined} */
  errorType?: string;
}

/** Options of {@linkcode inSpan}. */
export interface SpanOptions<T> {
  /** `client` for a call to another service (the model); `internal` for work in this process. @default {"internal"} */
  kind?: "client" | "internal";
  /** Set when the span starts. @default {{}} */
  attributes?: SpanAttributes;
  /** How the span ends after `fn` resolved. @default {() => ({})} */
  onResult?: (value: T) => SpanEnd;
  /** Attributes when `fn` rejected; the span is failed with `error.type`, the error's name unless given. @default {() => ({})} */
  onError?: (error: unknown) => SpanAttributes;
}

let api: typeof OtelApi | null = null;
let tracer: OtelApi.Tracer | null = null;
/** The GenAI client metrics, once telemetry is on. */
let metrics: { tokens: OtelApi.Histogram; duration: OtelApi.Histogram } | null = null;

// The bucket boundaries the GenAI semantic conventions advise for each metric: tokens 1 to 4^13 by powers of 4,
// seconds 0.01 to 81.92 by powers of 2.
const TOKEN_BUCKETS = Array.from({ length: 14 }, (_, i) => 4 ** i);
const DURATION_BUCKETS = Array.from({ length: 14 }, (_, i) => 0.01 * 2 ** i);

/**
 * Records spans from now on when `env` turns Deno's exporter on (`OTEL_DENO=true`, the only "on" value Deno
 * accepts): loads the API (from the npm cache, or the registry the first time) and uses Deno's tracer
 * provider. Resolves to null, or to one line saying why spans stay off when the package cannot be loaded
 * (Deno's own spans still go out then). Never rejects.
 */
export async function enableTelemetry(env: Record<string, string | undefined>): Promise<string | null> {
  if (env.OTEL_DENO !== "true") return null;
  try {
    const loaded = await import(API_SPECIFIER) as typeof OtelApi;
    tracer = loaded.trace.getTracer("mini-runtime-agent");
    const meter = loaded.metrics.getMeter("mini-runtime-agent");
    metrics = {
      tokens: meter.createHistogram("gen_ai.client.token.usage", {
        description:
          "Tokens of a model call, prompt (input) and completion (output): as reported, else estimated",
        unit: "{token}",
        advice: { explicitBucketBoundaries: TOKEN_BUCKETS },
      }),
      duration: meter.createHistogram("gen_ai.client.operation.duration", {
        description: "Duration of a model call, its retries included",
        unit: "s",
        advice: { explicitBucketBoundaries: DURATION_BUCKETS },
      }),
    };
    api = loaded;
    return null;
  } catch (error) {
    const reason = (error instanceof Error ? error.message : String(error)).split("\n")[0];
    return `Cannot record the agent's spans (OTEL_DENO=true): ${reason}; Deno's own spans still go out`;
  }
}

function defined(attributes: SpanAttributes = {}): OtelApi.Attributes {
  const kept: OtelApi.Attributes = {};
  for (const [key, value] of Object.entries(attributes)) {
    if (value !== null && value !== undefined) kept[key] = value as OtelApi.AttributeValue;
  }
  return kept;
}

/**
 * Runs `fn` inside a new active span named `name`, so spans it starts (Deno's `fetch` too) nest under it;
 * ends the span when `fn` settles and settles as `fn` does. A rejection marks the span failed and is passed
 * on untouched (its message is not recorded). Without telemetry, just `fn()`.
 */
export function inSpan<T>(name: string, fn: () => Promise<T>, options: SpanOptions<T> = {}): Promise<T> {
  if (tracer === null || api === null) return fn();
  const { kind = "internal", attributes, onResult = (): SpanEnd => ({}), onError = () => ({}) } = options;
  const { SpanKind, SpanStatusCode } = api;
  const spanKind = kind === "client" ? SpanKind.CLIENT : SpanKind.INTERNAL;
  return tracer.startActiveSpan(name, { kind: spanKind, attributes: defined(attributes) }, async (span) => {
    try {
      const value = await fn();
      const end = onResult(value);
      span.setAttributes(defined(end.attributes));
      if (end.errorType !== undefined) {
        span.setAttribute("error.type", end.errorType);
        span.setStatus({ code: SpanStatusCode.ERROR });
      }
      return value;
    } catch (error) {
      const name = error instanceof Error ? error.name : "_OTHER";
      span.setAttributes(defined({ "error.type": name, ...onError(error) }));
      span.setStatus({ code: SpanStatusCode.ERROR });
      throw error;
    } finally {
      span.end();
    }
  });
}

/**
 * `fn` bound to the span context active now, for work started later from elsewhere (a queued turn is
 * started by the turn before it, whose request's span must not become its parent). Without telemetry, `fn`.
 */
export function bindContext<A extends unknown[], R>(fn: (...args: A) => R): (...args: A) => R {
  return api === null ? fn : api.context.bind(api.context.active(), fn);
}

/**
 * The span of one turn: `gen_ai.conversation.id` is the session, the model the provider and the model asked
 * for (when known); the run id joins it to the trace file. Its usage sums the turn's model calls, with
 * `gen_ai.usage.cache_read.input_tokens` when a provider said how many prompt tokens it read from its cache.
 */
export function agentSpan(sessionId: string, model?: ModelInfo): SpanOptions<TurnResult> {
  return {
    attributes: {
      "gen_ai.operation.name": "invoke_agent",
      "gen_ai.agent.name": AGENT_NAME,
      "gen_ai.conversation.id": sessionId,
      "gen_ai.provider.name": model?.provider,
      "gen_ai.request.model": model?.model,
    },
    onResult: (result) => ({
      attributes: {
        "mini_agent.run.id": result.runId,
        "mini_agent.turn": result.turn,
        "mini_agent.turn.outcome": result.outcome,
        "mini_agent.tool_calls": result.toolCalls.length,
        "gen_ai.usage.input_tokens": result.usage.promptTokens,
        "gen_ai.usage.output_tokens": result.usage.completionTokens,
        "gen_ai.usage.cache_read.input_tokens": result.usage.cachedTokens,
        "gen_ai.usage.cache_creation.input_tokens": result.usage.cacheWriteTokens,
      },
      errorType: result.outcome === "error" ? "llm_error" : undefined,
    }),
  };
}

/**
 * `gen_ai.provider.name` for an OpenAI-compatible endpoint: the provider when its host says so, else
 * `openai`, the API it speaks.
 */
export function providerName(hostname: string): string {
  return /(^|\.)deepseek\.com$/.test(hostname) ? "deepseek" : "openai";
}

/**
 * The span of one model call to `url` (every attempt, its waits and its `fetch` spans). The attempt that
 * answered adds `gen_ai.response.finish_reasons` ({@linkcode noteResponse}). Its usage is the reply's as
 * reported: `gen_ai.usage.input_tokens` counts the cached and cache-written prompt tokens too, which
 * `gen_ai.usage.cache_read.input_tokens` and `gen_ai.usage.cache_creation.input_tokens` give when the provider
 * said.
 */
export function chatSpan(url: URL, model: string): SpanOptions<ChatReply> {
  const port = Number(url.port || (url.protocol === "https:" ? 443 : 80));
  return {
    kind: "client",
    attributes: {
      "gen_ai.operation.name": "chat",
      "gen_ai.provider.name": providerName(url.hostname),
      "gen_ai.request.model": model,
      "server.address": url.hostname,
      "server.port": port,
    },
    onResult: (reply) => ({
      attributes: {
        "gen_ai.response.model": reply.model,
        "gen_ai.usage.input_tokens": reply.usage?.promptTokens,
        "gen_ai.usage.output_tokens": reply.usage?.completionTokens,
        "gen_ai.usage.cache_read.input_tokens": reply.usage?.cachedTokens,
        "gen_ai.usage.cache_creation.input_tokens": reply.usage?.cacheWriteTokens,
        "mini_agent.llm.retries": reply.retries ?? 0,
      },
    }),
    onError: (error) =>
      error instanceof LlmError ? { "error.type": error.kind, "mini_agent.llm.retries": error.retries } : {},
  };
}

/**
 * Sets `gen_ai.response.finish_reasons` and `gen_ai.response.id` on the active span (the model call's), each
 * when it is the non-empty string a provider sends as `finish_reason` and as the completion's `id` (what its
 * own logs know the call by). A reply does not carry them; the attempt that read them says them here.
 */
export function noteResponse(finishReason: unknown, id: unknown): void {
  const span = api?.trace.getActiveSpan();
  if (typeof finishReason === "string" && finishReason !== "") {
    span?.setAttribute("gen_ai.response.finish_reasons", [finishReason]);
  }
  if (typeof id === "string" && id !== "") span?.setAttribute("gen_ai.response.id", id);
}

/**
 * Records one model call in the GenAI client metrics: its duration, and (when it answered) its input and
 * output tokens, the very counts the store keeps (`entry`), so the two never disagree; input counts the cached
 * prompt tokens too (the spans say how many). `errorType` marks a failed call. No-op without telemetry.
 */
export function recordModelCall(
  seconds: number,
  options: { model?: ModelInfo; entry?: UsageEntry; errorType?: string },
): void {
  if (metrics === null) return;
  const { model, entry, errorType } = options;
  const attributes = defined({
    "gen_ai.operation.name": "chat",
    "gen_ai.provider.name": model?.provider ?? "unknown",
    "gen_ai.request.model": model?.model,
    "gen_ai.response.model": entry?.model,
    "error.type": errorType,
  });
  metrics.duration.record(seconds, attributes);
  if (entry === undefined) return;
  metrics.tokens.record(entry.promptTokens, { ...attributes, "gen_ai.token.type": "input" });
  metrics.tokens.record(entry.completionTokens, { ...attributes, "gen_ai.token.type": "output" });
}

/** The span of one tool call: failed (`tool_error`) when its result is not ok, refused calls included. */
export function toolSpan(call: Pick<ToolCall, "id" | "name">): SpanOptions<ToolResult> {
  return {
    attributes: {
      "gen_ai.operation.name": "execute_tool",
      "gen_ai.tool.name": call.name,
      "gen_ai.tool.call.id": call.id,
      "gen_ai.tool.type": "function",
    },
    onResult: (result) => ({ errorType: result.ok ? undefined : "tool_error" }),
  };
}

/** The span of a compaction's summary call: why it was due and how many messages it summarizes. */
export function compactionSpan(trigger: string, messages: number): SpanOptions<unknown> {
  return {
    attributes: { "mini_agent.compaction.trigger": trigger, "mini_agent.compaction.messages": messages },
  };
}
