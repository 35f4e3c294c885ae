/**
 * Images in user messages on the three wire formats: each sends a user message's images in its provider's
 * shape (Chat Completions' `image_url` data URLs after the text, Messages' base64 `image` blocks before it,
 * Responses' `input_image` parts), whole and streamed, to a fake that enforces the provider's image rules and
 * answers by rule that it saw them; a message without images goes out as before; other roles never carry
 * them; the fake providers' rule reader counts them.
 */
import assert from "node:assert/strict";
import { Ajv2020 } from "./_dev_deps.ts";
import { HttpLLM } from "../src/llm/client.ts";
import type { BodyOptions, Dialect } from "../src/llm/dialect.ts";
import { ANTHROPIC_MESSAGES } from "../src/llm/anthropic.ts";
import { OPENAI_RESPONSES } from "../src/llm/responses.ts";
import { CHAT_COMPLETIONS } from "../src/llm/stream.ts";
import { buildRequestBody, serializeRequestBody } from "../src/llm/wire.ts";
import type { ImagePart, LlmApi, Message } from "../src/types.ts";
import { type Api, ruleMessages } from "../scripts/_fake_wires.ts";
import { ANTHROPIC_KEY, anthropicProvider } from "./_anthropic_fake.ts";
import { fixture, responsesFake } from "./_responses_fake.ts";
import { chatCompletionsFake, KEY, llmError, makeClient, MODEL, OPENAPI } from "./_openai_stubs.ts";

/** A 1×1 red PNG and a 1×1 red JPEG, as a browser's canvas encodes them (the JPEG without its ICC profile). */
const PNG: ImagePart = Object.freeze({
  mediaType: "image/png",
  data:
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAYAAAAfFcSJAAAADUlEQVR4AWI6w8DwHwAAAP//nfhwpgAAAAZJREFUAwAEPgHOcjLqVQAAAABJRU5ErkJggg==",
  name: "red.png",
});
const JPEG: ImagePart = Object.freeze({
  mediaType: "image/jpeg",
  data:
    "/9j/4AAQSkZJRgABAQAAAQABAAD/2wBDABALDA4MChAODQ4SERATGCgaGBYWGDEjJR0oOjM9PDkzODdASFxOQERXRTc4UG1RV19iZ2hnPk1xeXBkeFxlZ2P/2wBDARESEhgVGC8aGi9jQjhCY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2NjY2P/wAARCAABAAEDASIAAhEBAxEB/8QAFQABAQAAAAAAAAAAAAAAAAAAAAb/xAAUEAEAAAAAAAAAAAAAAAAAAAAA/8QAFQEBAQAAAAAAAAAAAAAAAAAABQb/xAAUEQEAAAAAAAAAAAAAAAAAAAAA/9oADAMBAAIRAxEAPwCdAHrB/9k=",
});
const PNG_URL = `data:image/png;base64,${PNG.data}`;
const JPEG_URL = `data:image/jpeg;base64,${JPEG.data}`;

const QUESTION = "what is in these?";
const ASK: Message[] = [
  { role: "system", content: "Be brief." },
  { role: "user", content: QUESTION, images: [PNG, JPEG] },
];
/** What every fake answers to {@linkcode ASK}: it saw both images, as the bytes they are. */
const SEEN = `I see 2 image(s) (image/png, image/jpeg): ${QUESTION}`;

const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
ajv.addSchema(JSON.parse(Deno.readTextFileSync(OPENAPI)), "openai");
const validateRequest = ajv.getSchema("openai#/components/schemas/CreateChatCompletionRequest")!;

const BODY_OPTIONS: BodyOptions = {
  model: MODEL,
  stream: false,
  responseFormat: null,
  origin: "https://api.example.com/v1 test-model",
  reasoningEffort: null,
  thinkingBudget: null,
  maxOutputTokens: null,
  cacheKey: null,
  toolChoice: "auto",
};
const DIALECTS: Record<LlmApi, Dialect> = {
  chat: CHAT_COMPLETIONS,
  anthropic: ANTHROPIC_MESSAGES,
  responses: OPENAI_RESPONSES,
};

function anthropicClient(fetch: typeof globalThis.fetch, baseUrl: string, stream: boolean): HttpLLM {
  const model = "claude-sonnet-4-5";
  return new HttpLLM({ api: "anthropic", baseUrl, apiKey: ANTHROPIC_KEY, model, stream, retries: 0, fetch });
}

function responsesClient(fetch: typeof globalThis.fetch, stream: boolean): HttpLLM {
  const baseUrl = "https://api.openai.test/v1";
  return new HttpLLM({ api: "responses", baseUrl, apiKey: KEY, model: "gpt-5", stream, retries: 0, fetch });
}

/** POSTs `body` to a fake's `fetch` as is, and reads its answer: the raw request a typed caller cannot build. */
async function postRaw(
  fetch: typeof globalThis.fetch,
  url: string,
  headers: Record<string, string>,
  body: unknown,
): Promise<{ status: number; body: Record<string, unknown> }> {
  const response = await fetch(url, { method: "POST", headers, body: JSON.stringify(body) });
  return { status: response.status, body: await response.json() };
}

for (const stream of [false, true]) {
  const mode = stream ? "streamed" : "whole";

  Deno.test(`HttpLLM (chat, ${mode}) sends a user message's text part then an image_url data URL per image, and the fake sees both`, async () => {
    const fake = chatCompletionsFake();
    const reply = await makeClient(fake.fetch, { stream }).llm.chat(ASK);
    assert.deepEqual(fake.refused, []);
    assert.equal(reply.content, SEEN);
    const [body] = fake.requests;
    assert.deepEqual(body.messages, [
      { role: "system", content: "Be brief." },
      {
        role: "user",
        content: [
          { type: "text", text: QUESTION },
          { type: "image_url", image_url: { url: PNG_URL } },
          { type: "image_url", image_url: { url: JPEG_URL } },
        ],
      },
    ]);
    assert.ok(validateRequest(body), ajv.errorsText(validateRequest.errors));
  });

  Deno.test(`HttpLLM (anthropic, ${mode}) sends a user message's base64 image blocks before its text, the breakpoint on the text, and the fake sees both`, async () => {
    const provider = anthropicProvider();
    const reply = await anthropicClient(provider.fetch, provider.baseUrl, stream).chat(ASK);
    assert.deepEqual(provider.refused, []);
    assert.equal(reply.content, SEEN);
    const [body] = provider.requests;
    assert.deepEqual(body.system, [{
      type: "text",
      text: "Be brief.",
      cache_control: { type: "ephemeral" },
    }]);
    assert.deepEqual(body.messages, [{
      role: "user",
      content: [
        { type: "image", source: { type: "base64", media_type: "image/png", data: PNG.data } },
        { type: "image", source: { type: "base64", media_type: "image/jpeg", data: JPEG.data } },
        { type: "text", text: QUESTION, cache_control: { type: "ephemeral" } },
      ],
    }]);
  });

  Deno.test(`HttpLLM (responses, ${mode}) sends a user item's input_text then an input_image data URL per image, and the fake sees both`, async () => {
    const fake = responsesFake([fixture("text")], KEY);
    const reply = await responsesClient(fake.fetch, stream).chat(ASK);
    assert.deepEqual(fake.refused, []);
    assert.equal(reply.content, SEEN);
    assert.deepEqual(fake.requests[0].input, [
      { role: "system", content: "Be brief." },
      {
        role: "user",
        content: [
          { type: "input_text", text: QUESTION },
          { type: "input_image", image_url: PNG_URL, detail: "auto" },
          { type: "input_image", image_url: JPEG_URL, detail: "auto" },
        ],
      },
    ]);
  });
}

Deno.test("a user message of images alone sends no empty text: Chat Completions and Responses only their image parts, Messages the images with the breakpoint on the last", async () => {
  const alone: Message[] = [{ role: "user", content: "", images: [PNG] }];
  const chat = chatCompletionsFake();
  assert.equal((await makeClient(chat.fetch).llm.chat(alone)).content, "I see 1 image(s) (image/png): ");
  assert.deepEqual((chat.requests[0].messages as Record<string, unknown>[])[0].content, [
    { type: "image_url", image_url: { url: PNG_URL } },
  ]);
  const provider = anthropicProvider();
  assert.equal(
    (await anthropicClient(provider.fetch, provider.baseUrl, false).chat(alone)).content,
    "I see 1 image(s) (image/png): ",
  );
  assert.deepEqual((provider.requests[0].messages as Record<string, unknown>[])[0].content, [
    {
      type: "image",
      source: { type: "base64", media_type: "image/png", data: PNG.data },
      cache_control: { type: "ephemeral" },
    },
  ]);
  const responses = responsesFake([fixture("text")], KEY);
  assert.equal(
    (await responsesClient(responses.fetch, false).chat(alone)).content,
    "I see 1 image(s) (image/png): ",
  );
  assert.deepEqual((responses.requests[0].input as Record<string, unknown>[])[0].content, [
    { type: "input_image", image_url: PNG_URL, detail: "auto" },
  ]);
});

Deno.test("a request without images is byte-identical to one whose messages carry images: [], on every wire format", () => {
  const plain: Message[] = [{ role: "system", content: "Be brief." }, { role: "user", content: QUESTION }];
  const empty: Message[] = [plain[0], { ...plain[1], images: [] }];
  for (const [api, dialect] of Object.entries(DIALECTS)) {
    for (const stream of [false, true]) {
      const options = { ...BODY_OPTIONS, stream };
      assert.equal(
        dialect.body(empty, [], options),
        dialect.body(plain, [], options),
        `${api} stream ${stream}`,
      );
    }
  }
  assert.equal(
    DIALECTS.chat.body(plain, [], BODY_OPTIONS),
    `{"model":"${MODEL}","messages":[{"role":"system","content":"Be brief."},{"role":"user","content":"${QUESTION}"}]}`,
  );
});

Deno.test("only a user message's images are sent: a system, runtime, assistant or tool message's are ignored on every wire format", () => {
  const images = [PNG];
  const carrying: Message[] = [
    { role: "system", content: "Be brief.", images },
    { role: "user", content: "6*7?" },
    {
      role: "assistant",
      content: null,
      toolCalls: [{ id: "c1", name: "calculator", arguments: "{}" }],
      images,
    },
    { role: "tool", content: '{"ok":true}', toolCallId: "c1", images },
    { role: "runtime", content: "[runtime] go on", images },
  ];
  const bare = carrying.map(({ images: _, ...message }) => message);
  for (const [api, dialect] of Object.entries(DIALECTS)) {
    assert.equal(dialect.body(carrying, [], BODY_OPTIONS), dialect.body(bare, [], BODY_OPTIONS), api);
  }
});

Deno.test("serializeRequestBody() writes images exactly as JSON.stringify(buildRequestBody()), again for a frozen message it keeps, and never keeps one whose images may change", () => {
  const frozen: Message = Object.freeze({
    role: "user",
    content: QUESTION,
    images: Object.freeze([PNG, JPEG]),
  });
  const messages = [ASK[0], frozen];
  const expected = JSON.stringify(buildRequestBody(MODEL, messages));
  assert.equal(serializeRequestBody(MODEL, messages), expected);
  assert.equal(serializeRequestBody(MODEL, [ASK[0], frozen]), expected);
  // A frozen message whose image list is not frozen may still change between requests: its new images go out.
  const images = [PNG];
  const open: Message = Object.freeze({ role: "user", content: QUESTION, images });
  serializeRequestBody(MODEL, [open]);
  images.push(JPEG);
  assert.equal(serializeRequestBody(MODEL, [open]), JSON.stringify(buildRequestBody(MODEL, [open])));
  assert.ok(serializeRequestBody(MODEL, [open]).includes(JPEG_URL));
});

Deno.test("the Chat Completions fake refuses in OpenAI's words an image_url of another MIME type, one not a URL, bytes of no image, and an image outside a user message", async () => {
  const fake = chatCompletionsFake();
  const headers = { authorization: `Bearer ${KEY}` };
  const url = "https://api.example.com/v1/chat/completions";
  const ask = (role: string, imageUrl: string) => ({
    model: MODEL,
    messages: [{
      role,
      content: [{ type: "text", text: "hi" }, { type: "image_url", image_url: { url: imageUrl } }],
    }],
  });
  const bmp = await postRaw(fake.fetch, url, headers, ask("user", `data:image/bmp;base64,${PNG.data}`));
  assert.equal(bmp.status, 400);
  assert.deepEqual(bmp.body.error, {
    message:
      "Invalid 'messages[0].content[1].image_url.url'. Expected a base64-encoded data URL with an image " +
      "MIME type (e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got unsupported MIME type 'image/bmp'.",
    type: "invalid_request_error",
  });
  const path = await postRaw(fake.fetch, url, headers, ask("user", "/tmp/red.png"));
  assert.equal(
    (path.body.error as { message: string }).message,
    "Invalid image_url at 'messages[0].content[1].image_url.url': expected a data URL or an http(s) URL, got '/tmp/red.png'.",
  );
  const text = await postRaw(fake.fetch, url, headers, ask("user", "data:image/png;base64,aGVsbG8="));
  assert.match((text.body.error as { message: string }).message, /^You uploaded an unsupported image/);
  const assistant = await postRaw(fake.fetch, url, headers, ask("assistant", PNG_URL));
  assert.match((assistant.body.error as { message: string }).message, /only supported in user messages/);
  // The same image, well formed, is taken.
  const good = await postRaw(fake.fetch, url, headers, ask("user", PNG_URL));
  assert.equal(good.status, 200);
  assert.equal(fake.refused.length, 4);
});

Deno.test("HttpLLM (chat) reports the fake's 400 for an image whose bytes are no image, in the provider's words", async () => {
  const fake = chatCompletionsFake();
  const notImage: Message[] = [{
    role: "user",
    content: "look",
    images: [{ mediaType: "image/png", data: "aGVsbG8=" }],
  }];
  const error = await llmError(makeClient(fake.fetch).llm.chat(notImage));
  assert.equal(error.kind, "http");
  assert.equal(error.status, 400);
  assert.match(error.message, /You uploaded an unsupported image/);
});

Deno.test("the Messages fake refuses in Anthropic's words an image block of another media type, a source not base64, bad base64, and bytes of another type", async () => {
  const provider = anthropicProvider();
  const headers = { "x-api-key": ANTHROPIC_KEY, "anthropic-version": "2023-06-01" };
  const url = `${provider.baseUrl}/v1/messages`;
  const ask = (source: Record<string, unknown>) => ({
    model: "claude-sonnet-4-5",
    max_tokens: 64,
    messages: [{ role: "user", content: [{ type: "image", source }, { type: "text", text: "hi" }] }],
  });
  const answers = [];
  for (
    const source of [
      { type: "base64", media_type: "image/bmp", data: PNG.data },
      { type: "file", file_id: "file_1" },
      { type: "base64", media_type: "image/png", data: "not base64!" },
      { type: "base64", media_type: "image/png", data: JPEG.data },
      { type: "base64", media_type: "image/png", data: PNG.data },
    ]
  ) answers.push(await postRaw(provider.fetch, url, headers, ask(source)));
  assert.deepEqual(answers.map((a) => a.status), [400, 400, 400, 400, 200]);
  assert.deepEqual(answers[0].body, {
    type: "error",
    error: {
      type: "invalid_request_error",
      message:
        "messages.0.content.0.image.source.base64.media_type: Input should be 'image/jpeg', 'image/png', " +
        "'image/gif' or 'image/webp'",
    },
  });
  assert.deepEqual(provider.refused.slice(1), [
    "messages.0.content.0.image.source: Input tag 'file' found using 'type' does not match any of the expected " +
    "tags: 'base64', 'url'",
    "messages.0.content.0.image.source.base64: invalid base64 data",
    "messages.0.content.0.image.source.base64.data: The image was specified using the image/png media type, but " +
    "the image appears to be a image/jpeg image",
  ]);
});

Deno.test("the Responses fake refuses in OpenAI's words an input_image of another MIME type, an unknown detail, and an image outside a user message", async () => {
  const fake = responsesFake([fixture("text")], KEY);
  const headers = { authorization: `Bearer ${KEY}` };
  const url = "https://api.openai.test/v1/responses";
  const ask = (role: string, image: Record<string, unknown>) => ({
    model: "gpt-5",
    store: false,
    input: [{ role, content: [{ type: "input_text", text: "hi" }, { type: "input_image", ...image }] }],
  });
  const bmp = await postRaw(
    fake.fetch,
    url,
    headers,
    ask("user", { image_url: `data:image/bmp;base64,${PNG.data}` }),
  );
  assert.equal(bmp.status, 400);
  assert.deepEqual(bmp.body.error, {
    message:
      "Invalid 'input[0].content[1].image_url'. Expected a base64-encoded data URL with an image MIME type " +
      "(e.g. 'data:image/png;base64,aW1nIGJ5dGVzIGhlcmU='), but got unsupported MIME type 'image/bmp'.",
    type: "invalid_request_error",
    param: "input[0].content[1].image_url",
    code: "invalid_value",
  });
  const detail = await postRaw(
    fake.fetch,
    url,
    headers,
    ask("user", { image_url: PNG_URL, detail: "ultra" }),
  );
  assert.equal(
    (detail.body.error as { message: string }).message,
    "Invalid value: 'ultra'. Supported values are: 'low', 'high', and 'auto'.",
  );
  const system = await postRaw(fake.fetch, url, headers, ask("system", { image_url: PNG_URL }));
  assert.match((system.body.error as { message: string }).message, /only supported in user messages/);
  const good = await postRaw(fake.fetch, url, headers, ask("user", { image_url: PNG_URL }));
  assert.equal(good.status, 200);
  assert.equal(fake.refused.length, 3);
});

Deno.test("ruleMessages() counts a user message's images on every wire format, and reads a request without images as before", () => {
  const history: Message[] = [
    { role: "system", content: "Be brief." },
    { role: "user", content: "6*7?" },
    { role: "assistant", content: null, toolCalls: [{ id: "c1", name: "calculator", arguments: '{"e":1}' }] },
    { role: "tool", content: '{"ok":true}', toolCallId: "c1" },
    { role: "assistant", content: "42." },
  ];
  // What each format's body reads as, the same for all three.
  const expected = [
    { role: "system", content: "Be brief." },
    { role: "user", content: "6*7?" },
    { role: "assistant", content: null, calls: [{ name: "calculator", arguments: '{"e":1}' }] },
    { role: "tool", content: '{"ok":true}' },
    { role: "assistant", content: "42." },
  ];
  for (const [api, dialect] of Object.entries(DIALECTS) as [Api, Dialect][]) {
    const read = (messages: Message[]) =>
      ruleMessages(api, JSON.parse(dialect.body(messages, [], BODY_OPTIONS)));
    assert.deepEqual(read(history), expected, api);
    const withImages = read([...history, { role: "user", content: QUESTION, images: [PNG, JPEG] }]);
    assert.deepEqual(withImages.slice(0, -1), expected, api);
    assert.deepEqual(withImages.at(-1), { role: "user", content: QUESTION, images: 2 }, api);
    const alone = read([...history, { role: "user", content: "", images: [PNG] }]);
    assert.deepEqual(alone.at(-1), { role: "user", content: "", images: 1 }, api);
  }
});
