/**
 * Stubs the LLM client tests share: a scripted fetch, a recording sleep, a client on them, and a Chat
 * Completions fake that enforces OpenAI's rules for a user message's content parts.
 */
import assert from "node:assert/strict";
import { LlmError } from "../src/errors.ts";
import { HttpLLM, type HttpLLMOptions } from "../src/llm/client.ts";
import type { Message } from "../src/types.ts";
import { imageTypeOf, isBase64, streamedReply, tokensOf, wholeReply } from "../scripts/_fake_wires.ts";

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

/** The formats OpenAI takes an image in, as its errors name them. */
const OPENAI_IMAGE_TYPES = ["image/png", "image/jpeg", "image/gif", "image/webp"];

/**
 * What OpenAI would say of an image URL at `param` (`messages[0].content[1].image_url.url`,
 * `input[0].content[1].image_url`), in this fake's words after the API's errors; null when it would take it:
 * an http(s) URL (never fetched here), or a base64 `data:` URL of one of the four formats whose bytes are an
 * image. Shared by the Chat Completions and Responses fakes, which are one provider's.
 */
export function imageUrlProblem(url: unknown, param: string): string | null {
  if (typeof url !== "string") {
    return `Invalid type for '${param}': expected a string, but got ${typeof url}.`;
  }
  if (/^https?:\/\/\S+$/.test(url)) return null;
  if (!url.startsWith("data:")) {
    return `Invalid image_url at '${param}': expected a data URL or an http(s) URL, got '${
      url.slice(0, 16)
    }'.`;
  }
  const expected = `Invalid '${param}'. Expected a base64-encoded data URL with an image MIME type ` +
    `(e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got`;
  const found = /^data:([^;,]*)((?:;[^;,]*)*),(.*)$/s.exec(url);
  if (found === null) return `${expected} a value without a comma.`;
  const [, mime, params, data] = found;
  if (!OPENAI_IMAGE_TYPES.includes(mime)) return `${expected} unsupported MIME type '${mime}'.`;
  if (!params.split(";").includes("base64")) return `${expected} a value without the 'base64' encoding.`;
  if (!isBase64(data) || imageTypeOf(data) === null) {
    return "You uploaded an unsupported image. Please make sure your image has of one the following formats: " +
      "['png', 'jpeg', 'gif', 'webp'].";
  }
  return null;
}

/** A Chat Completions fake: what it was sent, what it refused. */
export interface ChatCompletionsFake {
  fetch: typeof globalThis.fetch;
  /** Every request body, parsed, in order (refused ones too). */
  requests: Record<string, unknown>[];
  /** The messages of the 400s and 401s it answered. */
  refused: string[];
}

/** Why OpenAI would refuse the content parts of message `i`, in this fake's words after its; null when not. */
function contentProblem(message: Record<string, unknown>, i: number): string | null {
  const content = message.content;
  if (!Array.isArray(content)) return null;
  if (content.length === 0) {
    return `Invalid 'messages[${i}].content': empty array. Expected an array with minimum length 1, but got an empty array instead.`;
  }
  for (const [j, part] of (content as Record<string, unknown>[]).entries()) {
    const param = `messages[${i}].content[${j}]`;
    if (part.type === "text") {
      if (typeof part.text !== "string") return `Missing required parameter: '${param}.text'.`;
    } else if (part.type === "image_url") {
      if (message.role !== "user") {
        return `Invalid '${param}': image content parts are only supported in user messages.`;
      }
      const image = part.image_url as Record<string, unknown> | undefined;
      const problem = imageUrlProblem(image?.url, `${param}.image_url.url`);
      if (problem !== null) return problem;
    } else {
      return `Invalid value: '${part.type}'. Supported values are: 'text', 'image_url', 'input_audio', and 'file'.`;
    }
  }
  return null;
}

/**
 * A fake `/chat/completions` behind an injected `fetch`, for the test key ({@linkcode KEY}): it refuses with
 * OpenAI's 400 shape (`invalid_request_error`) a content part it does not know, a text part without text, an
 * empty content array, or an image part outside a user message or whose URL {@linkcode imageUrlProblem}
 * refuses; it answers by rule, whole or streamed as asked: a last user message with images `I see 2 image(s)
 * (image/png, image/jpeg): text`, anything else `echo: text`.
 */
export function chatCompletionsFake(): ChatCompletionsFake {
  const requests: Record<string, unknown>[] = [];
  const refused: string[] = [];
  function answer(input: string | URL | Request, init: RequestInit = {}): Response {
    if (!String(input).endsWith("/chat/completions")) return new Response("not found", { status: 404 });
    const body = JSON.parse(String(init.body));
    requests.push(body);
    const auth = new Headers(init.headers).get("authorization");
    const messages = (Array.isArray(body.messages) ? body.messages : []) as Record<string, unknown>[];
    const problem = auth !== `Bearer ${KEY}`
      ? `Incorrect API key provided: ${auth?.slice(7)}.`
      : messages.length === 0
      ? "Invalid 'messages': empty array. Expected an array with minimum length 1, but got an empty array instead."
      : messages.map(contentProblem).find((found) => found !== null) ?? null;
    if (problem !== null) {
      refused.push(problem);
      const status = auth === `Bearer ${KEY}` ? 400 : 401;
      return Response.json({ error: { message: problem, type: "invalid_request_error" } }, { status });
    }
    const last = messages.at(-1)!;
    const parts = (Array.isArray(last.content) ? last.content : [{ type: "text", text: last.content }]) as {
      type: string;
      text?: string;
      image_url?: { url: string };
    }[];
    const text = parts.filter((p) => p.type === "text").map((p) => p.text).join(" ");
    const images = parts.filter((p) => p.type === "image_url").map((p) =>
      imageTypeOf(p.image_url!.url.split(",")[1])
    );
    const content = last.role === "user" && images.length > 0
      ? `I see ${images.length} image(s) (${images.join(", ")}): ${text}`
      : `echo: ${text}`;
    const usage = { input: tokensOf(messages), output: tokensOf(content), read: 0, written: 0 };
    const whole = wholeReply("chat", String(body.model), { content, calls: [] }, usage);
    if (body.stream !== true) return Response.json(whole);
    return new Response(streamedReply("chat", whole).join(""), {
      headers: { "content-type": "text/event-stream" },
    });
  }
  const fetch = (input: string | URL | Request, init?: RequestInit) => Promise.resolve(answer(input, init));
  return { fetch, requests, refused };
}
