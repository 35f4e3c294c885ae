/**
 * The rule model of the HTTP tests behind a real wire: a loopback server that speaks Chat Completions,
 * Messages and Responses (in the fakes' published shapes, whole or streamed as the request asks) and lets a
 * {@linkcode RuleLLM} decide every reply, so a test that holds, fails or counts the rule model drives the
 * real model client of each `LLM_API` the same way.
 * @module
 */
import { LlmError } from "../src/errors.ts";
import { HttpLLM } from "../src/llm/client.ts";
import type { LlmApi, Message } from "../src/types.ts";
import { API_PATHS, ruleMessages, streamedReply, wholeReply } from "../scripts/_fake_wires.ts";
import type { RuleLLM } from "./_http_harness.ts";

/** A provider's error body for `message`, in its own shape. */
function errorBody(api: LlmApi, status: number, message: string): unknown {
  if (api === "anthropic") {
    const type = status === 529 ? "overloaded_error" : status >= 500 ? "api_error" : "invalid_request_error";
    return { type: "error", error: { type, message } };
  }
  return { error: { message, type: status >= 500 ? "server_error" : "invalid_request_error" } };
}

/** The running provider. */
export interface RuleProvider {
  /** The provider's root, with `/v1`. */
  url: string;
  /**
   * A client of `api` for this provider, streamed or not, that tries once.
   * @param timeoutSeconds one attempt's deadline @default {60}
   */
  model(api: LlmApi, stream: boolean, timeoutSeconds?: number): HttpLLM;
  /** Stops the server, once every exchange has ended. */
  close(): Promise<void>;
}

/**
 * Starts the provider on a loopback port. A reply the rule model fails with goes out as the provider's HTTP
 * error (its status, else 500), but for a timeout, which is a reply that never comes: the client's own
 * deadline ends it (the provider answers nobody then). A client that leaves aborts the rule model's call.
 */
export function ruleProvider(llm: RuleLLM): RuleProvider {
  const parked = new Set<() => void>();
  const server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
    const path = new URL(request.url).pathname;
    const api = (Object.keys(API_PATHS) as LlmApi[]).find((name) => API_PATHS[name] === path);
    if (request.method !== "POST" || api === undefined) {
      await request.body?.cancel();
      return Response.json({ error: { message: `no route ${path}` } }, { status: 404 });
    }
    const body = await request.json();
    const messages = ruleMessages(api, body).map(({ role, content }) => ({ role, content }) as Message);
    try {
      const reply = await llm.chat(messages, { signal: request.signal });
      const input = reply.usage?.promptTokens ?? 0;
      const output = reply.usage?.completionTokens ?? 0;
      const decision = {
        content: reply.content,
        calls: reply.toolCalls.map(({ id, name, arguments: args }) => ({ id, name, arguments: args })),
      };
      const whole = wholeReply(api, String(body.model), decision, { input, output, read: 0, written: 0 });
      if (body.stream !== true) return Response.json(whole);
      return new Response(streamedReply(api, whole).join(""), {
        headers: { "content-type": "text/event-stream" },
      });
    } catch (error) {
      if (!(error instanceof LlmError) || error.kind === "aborted") {
        return new Response(null, { status: 499 });
      }
      if (error.kind === "timeout") {
        // Until the client leaves, or the provider closes: a client's abort does not always reach the server.
        await new Promise<void>((resolve) => {
          parked.add(resolve);
          request.signal.addEventListener("abort", () => resolve(), { once: true });
          if (request.signal.aborted) resolve();
        });
        return new Response(null, { status: 499 });
      }
      const status = error.status ?? 500;
      return Response.json(errorBody(api, status, error.message), { status });
    }
  });
  const url = `http://127.0.0.1:${server.addr.port}/v1`;
  return {
    url,
    model: (api, stream, timeoutSeconds = 60) =>
      new HttpLLM({
        api,
        // The Anthropic base URL is the root; the OpenAI ones hold its `/v1`.
        baseUrl: api === "anthropic" ? url.replace(/\/v1$/, "") : url,
        model: "fake-model",
        stream,
        retries: 0,
        timeoutSeconds,
      }),
    close: () => {
      for (const resume of parked) resume();
      return server.shutdown();
    },
  };
}
