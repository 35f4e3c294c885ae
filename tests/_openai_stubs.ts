/** Stubs the LLM client tests share: a scripted fetch, a recording sleep, a client on them. */
import assert from "node:assert/strict";
import { LlmError } from "../src/errors.ts";
import { HttpLLM, type HttpLLMOptions } from "../src/llm/client.ts";
import type { Message } from "../src/types.ts";

// The project's own copies (tests/fixtures/README.md says where they came from), resolved from this file.
export const WIRE = new URL("./fixtures/wire/", import.meta.url);
export const OPENAPI = new URL("./fixtures/openai/chat-completions.openapi.json", import.meta.url);

export const KEY = "sk-test-SENTINEL-123";
export const BASE = "https://api.example.com/v1";
export const MODEL = "test-model";
export const HELLO: Message[] = [{ role: "user", content: "hello" }];

/** One request the stub fetch saw. */
export interface Sent {
  url: string;
  method: string | undefined;
  headers: Headers;
  body: Record<string, unknown>;
  signal: AbortSignal;
}

/** One scripted answer of the stub fetch, given the signal the client passed. */
export type Step = (signal: AbortSignal) => Promise<Response>;

/** A fetch that answers with `steps` in order (the last one repeats) and records every request. */
export function stubFetch(...steps: Step[]): { fetch: typeof globalThis.fetch; sent: Sent[] } {
  const sent: Sent[] = [];
  function fetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
    const signal = init.signal ?? new AbortController().signal;
    sent.push({
      url: String(input),
      method: init.method,
      headers: new Headers(init.headers),
      body: JSON.parse(String(init.body)),
      signal,
    });
    return steps[Math.min(sent.length, steps.length) - 1](signal);
  }
  return { fetch, sent };
}

/** Answers `status` with `body` (a string as is, anything else as JSON). */
export function respond(status: number, body: unknown, headers: Record<string, string> = {}): Step {
  const text = typeof body === "string" ? body : JSON.stringify(body);
  return () => Promise.resolve(new Response(text, { status, headers }));
}

/** A sleep that records each requested delay and returns at once. */
export function recordingSleep(): { sleep: (ms: number) => Promise<void>; delays: number[] } {
  const delays: number[] = [];
  function sleep(ms: number): Promise<void> {
    delays.push(ms);
    return Promise.resolve();
  }
  return { sleep, delays };
}

/** A client on `fetch` with the test key, base URL and model, and a recording sleep. */
export function makeClient(
  fetch: typeof globalThis.fetch,
  options: Partial<HttpLLMOptions> = {},
): { llm: HttpLLM; delays: number[] } {
  const { sleep, delays } = recordingSleep();
  const llm = new HttpLLM({ baseUrl: BASE, apiKey: KEY, model: MODEL, fetch, sleep, ...options });
  return { llm, delays };
}

/** The LlmError `promise` rejects with; fails the test if it resolves or rejects with something else. */
export async function llmError(promise: Promise<unknown>): Promise<LlmError> {
  try {
    await promise;
  } catch (error) {
    assert.ok(error instanceof LlmError, `expected an LlmError, got ${error}`);
    return error;
  }
  assert.fail("expected the call to reject");
}

/** `all` cut at the given positions (out-of-range and repeated ones ignored), in order. */
export function cutBytes(all: Uint8Array, positions: number[]): Uint8Array[] {
  const points = [...new Set(positions)].filter((p) => p > 0 && p < all.length).sort((a, b) => a - b);
  const pieces: Uint8Array[] = [];
  let start = 0;
  for (const point of [...points, all.length]) {
    pieces.push(all.slice(start, point));
    start = point;
  }
  return pieces;
}
