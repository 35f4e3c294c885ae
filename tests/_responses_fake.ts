/**
 * A fake OpenAI Responses endpoint as a `fetch`: it serves the fixtures of tests/fixtures/responses/ whole or
 * as the stream events the reference describes, and refuses in OpenAI's words (400 `invalid_request_error`)
 * what the real API refuses: `store` not false, reasoning items it did not produce (or changed), reasoning
 * sent back without `include: ["reasoning.encrypted_content"]`, a `function_call_output` whose call is not
 * earlier in `input`, an `input_image` outside a user message or that is not a data URL of an image
 * (see `imageUrlProblem` in `_openai_stubs.ts`), and a wrong key (401). A request whose last input item is a
 * user message with images it answers by rule, whatever the fixture: `I see 2 image(s) (image/png,
 * image/jpeg): text`.
 */
import { imageUrlProblem } from "./_openai_stubs.ts";
import { imageTypeOf } from "../scripts/_fake_wires.ts";

/** Where the fixtures are. */
export const RESPONSES_FIXTURES = new URL("./fixtures/responses/", import.meta.url);

/** One fixture: a response object, an HTTP error answer, or (streamed only) raw stream events. */
export type FakeReply =
  | { response: Record<string, unknown> }
  | { status: number; headers?: Record<string, string>; body: unknown }
  | { events: Record<string, unknown>[] };

/** Reads `tests/fixtures/responses/<name>.json`. */
export function fixture(name: string): FakeReply {
  return JSON.parse(Deno.readTextFileSync(new URL(`${name}.json`, RESPONSES_FIXTURES)));
}

/** The fake, and what it saw. */
export interface ResponsesFake {
  fetch: typeof globalThis.fetch;
  /** Every request body, parsed, in order (refused ones included). */
  requests: Record<string, unknown>[];
  /** The messages of the 400s and 401s it answered. */
  refused: string[];
}

/** A refusal in OpenAI's shape. */
interface Refusal {
  status: number;
  error: { message: string; type: "invalid_request_error"; param: string | null; code: string | null };
}

function refuse(status: number, message: string, param: string | null, code: string | null): Refusal {
  return { status, error: { message, type: "invalid_request_error", param, code } };
}

/** The stream events of a response object, as the API sends them. */
export function streamEvents(response: Record<string, unknown>): Record<string, unknown>[] {
  const events: Record<string, unknown>[] = [];
  const emit = (type: string, fields: Record<string, unknown>) => events.push({ type, ...fields });
  emit("response.created", { response: { ...response, status: "in_progress", output: [], usage: null } });
  const output = response.output as Record<string, unknown>[];
  for (const [i, item] of output.entries()) {
    const at = { item_id: item.id, output_index: i };
    if (item.type === "message") {
      emit("response.output_item.added", { output_index: i, item: { ...item, content: [] } });
      for (const [j, part] of (item.content as Record<string, string>[]).entries()) {
        const field = part.type === "refusal" ? "refusal" : "text";
        const kind = part.type === "refusal" ? "refusal" : "output_text";
        const text = part[field];
        const half = Math.ceil(text.length / 2);
        for (const piece of [text.slice(0, half), text.slice(half)]) {
          emit(`response.${kind}.delta`, { ...at, content_index: j, delta: piece });
        }
        emit(`response.${kind}.done`, { ...at, content_index: j, [field]: text });
      }
    } else if (item.type === "function_call") {
      emit("response.output_item.added", { output_index: i, item: { ...item, arguments: "" } });
      const args = item.arguments as string;
      for (const piece of [args.slice(0, 5), args.slice(5)]) {
        emit("response.function_call_arguments.delta", { ...at, delta: piece });
      }
      emit("response.function_call_arguments.done", { ...at, arguments: args });
    } else {
      emit("response.output_item.added", { output_index: i, item: { ...item, summary: [] } });
      for (const [j, part] of ((item.summary ?? []) as Record<string, string>[]).entries()) {
        emit("response.reasoning_summary_text.delta", { ...at, summary_index: j, delta: part.text });
      }
    }
    emit("response.output_item.done", { output_index: i, item });
  }
  emit(response.status === "incomplete" ? "response.incomplete" : "response.completed", { response });
  return events.map((event, sequence_number) => ({ ...event, sequence_number }));
}

function sse(events: Record<string, unknown>[]): Response {
  const text = events.map((event) => `event: ${event.type}\ndata: ${JSON.stringify(event)}\n\n`).join("");
  return new Response(text, { headers: { "content-type": "text/event-stream" } });
}

/** Why the API would refuse `body`, in its words; null when it would not. */
function violation(body: Record<string, unknown>, produced: Map<string, string>): Refusal | null {
  if (body.store !== false) {
    return refuse(400, "This fake only serves stateless requests: 'store' must be false.", "store", null);
  }
  const input = body.input;
  if (!Array.isArray(input)) return refuse(400, "Missing required parameter: 'input'.", "input", null);
  const calls = new Set<string>();
  let reasoning = false;
  for (const [i, item] of (input as Record<string, unknown>[]).entries()) {
    const message = typeof item.role === "string" && Array.isArray(item.content);
    const parts = message ? item.content as Record<string, unknown>[] : [];
    for (const [j, part] of parts.entries()) {
      const param = `input[${i}].content[${j}]`;
      if (part.type === "input_image") {
        const problem = item.role === "user"
          ? imageUrlProblem(part.image_url, `${param}.image_url`)
          : `Invalid '${param}': image inputs are only supported in user messages.`;
        if (problem !== null) return refuse(400, problem, `${param}.image_url`, "invalid_value");
        if (part.detail !== undefined && !["low", "high", "auto"].includes(String(part.detail))) {
          return refuse(
            400,
            `Invalid value: '${part.detail}'. Supported values are: 'low', 'high', and 'auto'.`,
            `${param}.detail`,
            "invalid_value",
          );
        }
      }
    }
    if (item.type === "function_call") calls.add(String(item.call_id));
    if (item.type === "function_call_output" && !calls.has(String(item.call_id))) {
      return refuse(
        400,
        `No tool call found for function call output with call_id ${item.call_id}.`,
        `input[${i}]`,
        null,
      );
    }
    if (item.type === "reasoning") {
      reasoning = true;
      const id = String(item.id);
      if (produced.get(id) !== item.encrypted_content) {
        return refuse(
          400,
          `The encrypted content for item ${id} could not be verified.`,
          `input[${i}].encrypted_content`,
          "invalid_encrypted_content",
        );
      }
    }
  }
  const include = Array.isArray(body.include) ? body.include : [];
  if (reasoning && !include.includes("reasoning.encrypted_content")) {
    return refuse(
      400,
      "Reasoning items were sent without include: ['reasoning.encrypted_content'] on a stateless request.",
      "include",
      null,
    );
  }
  return null;
}

/**
 * A fake that answers its requests with `replies` in order (the last one repeats), checking each request
 * first (see the module documentation); `apiKey` is the key it accepts.
 */
export function responsesFake(replies: FakeReply[], apiKey: string): ResponsesFake {
  const requests: Record<string, unknown>[] = [];
  const refused: string[] = [];
  const produced = new Map<string, string>();
  let served = 0;
  function fetch(input: string | URL | Request, init: RequestInit = {}): Promise<Response> {
    if (!String(input).endsWith("/responses")) {
      return Promise.resolve(new Response("not found", { status: 404 }));
    }
    const body = JSON.parse(String(init.body));
    requests.push(body);
    const auth = new Headers(init.headers).get("authorization");
    const refusal = auth === `Bearer ${apiKey}`
      ? violation(body, produced)
      : refuse(401, `Incorrect API key provided: ${auth?.slice(7)}.`, null, "invalid_api_key");
    if (refusal !== null) {
      refused.push(refusal.error.message);
      return Promise.resolve(Response.json({ error: refusal.error }, { status: refusal.status }));
    }
    const reply = replies[Math.min(served++, replies.length - 1)];
    const seen = imagesReply(body.input);
    return Promise.resolve(serve(seen ?? reply, body.stream === true, produced));
  }
  return { fetch, requests, refused };
}

/** The rule's answer to a last input item that is a user message with images; null for any other request. */
function imagesReply(input: Record<string, unknown>[]): FakeReply | null {
  const last = input.at(-1);
  const parts = (Array.isArray(last?.content) ? last.content : []) as Record<string, unknown>[];
  const images = parts.filter((part) => part.type === "input_image");
  if (last?.role !== "user" || images.length === 0) return null;
  const types = images.map((part) => imageTypeOf(String(part.image_url).split(",")[1])).join(", ");
  const text = parts.filter((part) => part.type === "input_text").map((part) => part.text).join(" ");
  const answer = `I see ${images.length} image(s) (${types}): ${text}`;
  const response = structuredClone((fixture("text") as { response: Record<string, unknown> }).response);
  const [message] = response.output as { content: { text: string }[] }[];
  message.content[0].text = answer;
  return { response };
}

function serve(reply: FakeReply, stream: boolean, produced: Map<string, string>): Response {
  if ("status" in reply) return Response.json(reply.body, { status: reply.status, headers: reply.headers });
  if ("events" in reply) return sse(reply.events);
  const response = reply.response;
  for (const item of response.output as Record<string, unknown>[]) {
    if (item.type === "reasoning") produced.set(String(item.id), String(item.encrypted_content));
  }
  return stream ? sse(streamEvents(response)) : Response.json(response);
}
