/**
 * The surfaces in each wire format (`LLM_API`), streamed and whole: chat, the sessions API and the OpenAI route run
 * a tool turn through the real model client against the fake provider on loopback, which speaks Chat
 * Completions, Messages and Responses in their published shapes, and answers with what the tools returned.
 */
import assert from "node:assert/strict";
import { HttpLLM } from "../src/llm/client.ts";
import type { LlmApi } from "../src/types.ts";
import { startCrashProvider } from "../scripts/_fake_provider.ts";
import { httpHarness, parseSse, postMessage } from "./_http_harness.ts";
import { PassThrough } from "node:stream";
import { runChat } from "../src/cli/chat.ts";
import { parseApprovalPolicy } from "../src/approval/policy.ts";
import { harness, textSink } from "./_harness.ts";

const APIS: readonly LlmApi[] = ["chat", "anthropic", "responses"];

function model(api: LlmApi, url: string, stream: boolean): HttpLLM {
  // The provider's root is the Anthropic base URL; the OpenAI ones hold its `/v1`.
  const baseUrl = api === "anthropic" ? url.replace(/\/v1$/, "") : url;
  return new HttpLLM({ api, baseUrl, model: "fake-model", stream, retries: 0 });
}

for (const api of APIS) {
  for (const stream of [false, true]) {
    const mode = stream ? "streamed" : "whole";

    Deno.test(`LLM_API=${api} (${mode}): chat answers a tool turn and a follow-up that reads the first`, async () => {
      const provider = startCrashProvider({ seed: 5, maxDelayMs: 0 });
      try {
        using h = harness([]);
        h.agent.llm = model(api, provider.url, stream);
        const [input, output, status] = [new PassThrough(), textSink(), textSink()];
        const chat = runChat({
          sessionId: "c",
          userId: "u",
          deps: h.agent,
          store: h.store,
          emit: h.run.emit,
          input,
          output: output.stream,
          status: status.stream,
          interactive: false,
          model: "fake-model",
          setModel: () => {},
        });
        input.end("my name is Ada. what is 6*7?\nwhat is my name?\n");
        assert.equal(await chat, 0, status.text());
        assert.match(output.text(), /6\*7 = 42[^]*Your name is Ada\./);
        await provider.idle();
        const { requests } = provider.stats;
        assert.equal(requests[api], Object.values(requests).reduce((a, b) => a + b), "only its own format");
      } finally {
        await provider.close();
      }
    });

    Deno.test(`LLM_API=${api} (${mode}): the sessions API answers a tool turn with the tool's result`, async () => {
      const provider = startCrashProvider({ seed: 3, maxDelayMs: 0 });
      try {
        using h = httpHarness({ model: model(api, provider.url, stream) });
        const accept = stream ? "text/event-stream" : "application/json";
        const response = await h.handler(postMessage("s1", { message: "what is 6*7?" }, { accept }));
        assert.equal(response.status, 200);
        let answer: string;
        if (stream) {
          const frames = parseSse(await response.text());
          const deltas = frames.filter((f) => f.event === "delta").map((f) => f.data.text).join("");
          answer = (frames.find((f) => f.event === "answer")!.data.data as { text: string }).text;
          assert.equal(deltas, answer, "the answer streamed as it came");
          assert.ok(frames.some((f) => f.event === "tool_result"));
        } else {
          const body = await response.json();
          assert.equal(body.outcome, "answered", JSON.stringify(body));
          answer = body.answer;
        }
        assert.match(answer, /6\*7 = 42/);
        await provider.idle();
        const { requests } = provider.stats;
        assert.equal(requests[api], Object.values(requests).reduce((a, b) => a + b), "only its own format");
      } finally {
        await provider.close();
      }
    });

    Deno.test(`LLM_API=${api} (${mode}): the OpenAI route answers a tool turn, and the next request carries the session`, async () => {
      const provider = startCrashProvider({ seed: 4, maxDelayMs: 0 });
      try {
        using h = httpHarness({ model: model(api, provider.url, stream) });
        const post = (content: string) =>
          h.handler(
            new Request("http://agent.test/v1/chat/completions", {
              method: "POST",
              headers: { "content-type": "application/json", "x-session-id": "o1" },
              body: JSON.stringify({ model: "mini-agent", stream, messages: [{ role: "user", content }] }),
            }),
          );
        const first = await post("my name is Ada, what is 2+3?");
        assert.equal(first.status, 200);
        const text = async (response: Response) => {
          if (!stream) return (await response.json()).choices[0].message.content as string;
          const frames = (await response.text()).split("\n\n").filter((f) =>
            f !== "" && f !== "data: [DONE]"
          );
          return frames.map((f) => JSON.parse(f.replace(/^data: /, "")).choices[0]?.delta.content ?? "").join(
            "",
          );
        };
        assert.match(await text(first), /2\+3 = 5/);
        const second = await post("what is my name?");
        assert.equal(await text(second), "Your name is Ada.");
        await provider.idle();
        const { requests } = provider.stats;
        assert.equal(requests[api], Object.values(requests).reduce((a, b) => a + b), "only its own format");
      } finally {
        await provider.close();
      }
    });
  }
}

/** What each provider says when it refuses a request, in its own error shape. */
const REFUSED: Record<LlmApi, { said: string; body: unknown }> = {
  chat: {
    said: "The model `fake-model` does not exist",
    body: { error: { message: "The model `fake-model` does not exist" } },
  },
  anthropic: {
    said: "model: fake-model not found",
    body: { type: "error", error: { type: "not_found_error", message: "model: fake-model not found" } },
  },
  responses: {
    said: "The requested model 'fake-model' does not exist.",
    body: {
      error: { message: "The requested model 'fake-model' does not exist.", type: "invalid_request_error" },
    },
  },
};

for (const api of APIS) {
  for (const stream of [false, true]) {
    Deno.test(`LLM_API=${api} (${stream ? "streamed" : "whole"}): a provider's refusal ends the turn llm_error with the provider's words, and a tool that asks waits for approval`, async () => {
      const refusing = new HttpLLM({
        api,
        baseUrl: "http://127.0.0.1:9/v1",
        model: "fake-model",
        stream,
        retries: 0,
        apiKey: "sk-SECRET-KEY-000",
        fetch: () => Promise.resolve(Response.json(REFUSED[api].body, { status: 404 })),
      });
      using h = httpHarness({ model: refusing });
      const response = await h.handler(postMessage("e1", { message: "hello" }));
      assert.equal(response.status, 502);
      const text = await response.text();
      assert.ok(text.includes(REFUSED[api].said), text);
      assert.match(text, /llm_error/);
      assert.ok(!text.includes("SECRET-KEY"));

      const provider = startCrashProvider({ seed: 6, maxDelayMs: 0 });
      try {
        using asking = httpHarness({ model: model(api, provider.url, stream) });
        asking.deps.agent.approval = parseApprovalPolicy({ tools: { calculator: "ask" } });
        const waiting = await asking.handler(postMessage("a1", { message: "what is 6*7?" }));
        const body = await waiting.json();
        assert.equal(body.outcome, "awaiting_approval", JSON.stringify(body));
        assert.equal(body.approval.calls[0].name, "calculator");
        await provider.idle();
      } finally {
        await provider.close();
      }
    });
  }
}
