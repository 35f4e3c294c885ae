/** What the tests of the OpenAI-compatible routes share: the official client, and OpenAI's response schemas. */
import assert from "node:assert/strict";
import { Ajv2020, OpenAI } from "./_dev_deps.ts";
import { OPENAPI } from "./_openai_stubs.ts";
import { freePort } from "../scripts/_bench_process.ts";
import { childEnv, ROOT, type ServeProcess, spawnServe } from "./_harness.ts";

const ajv = new Ajv2020({ strict: false, validateFormats: false, allErrors: true });
ajv.addSchema(JSON.parse(Deno.readTextFileSync(OPENAPI)), "openai");

/** The schemas of OpenAI's published document that a completion and a chunk must satisfy. */
export const SCHEMAS = {
  completion: ajv.getSchema("openai#/components/schemas/CreateChatCompletionResponse")!,
  chunk: ajv.getSchema("openai#/components/schemas/CreateChatCompletionStreamResponse")!,
};

/** Fails unless `body` (as it was on the wire: through JSON) satisfies `schema`. */
export function assertValid(schema: keyof typeof SCHEMAS, body: unknown): void {
  const validate = SCHEMAS[schema];
  assert.ok(
    validate(JSON.parse(JSON.stringify(body))),
    `${ajv.errorsText(validate.errors)}\n${JSON.stringify(body)}`,
  );
}

/** A client of the server at `url` (its origin), without retries: a test sees the first answer. */
export function client(url: string, apiKey = "no-auth-configured"): OpenAI {
  return new OpenAI({ apiKey, baseURL: `${url}/v1`, maxRetries: 0 });
}

/** The messages of a one-question request. */
export function ask(content: string): { role: "user"; content: string }[] {
  return [{ role: "user", content }];
}

/** What `promise` rejected with, or null when it resolved. */
export function rejection(promise: Promise<unknown>): Promise<unknown> {
  return promise.then(() => null, (error) => error);
}

/**
 * `deno task serve` for a client's tests, on a free loopback port of `dir`, with the model at `modelUrl` and
 * `token` for alice: the process and its URL.
 */
export function serveForClients(
  dir: string,
  modelUrl: string,
  token: string,
): { serve: ServeProcess; url: string } {
  const port = freePort();
  const env = { AGENT_PORT: String(port), OPENAI_BASE_URL: modelUrl, AGENT_API_TOKENS: `${token}:alice` };
  return { serve: spawnServe(["task", "serve"], childEnv(dir, env)), url: `http://127.0.0.1:${port}` };
}

/**
 * Runs an AI SDK client fixture (`tests/fixtures/<name>.ts`) with `args`, in a child process granted what the
 * SDK needs (`--allow-sys=hostname`, see `loadAiSdk`): its JSON output lines, once it exited 0.
 */
export async function runAiSdkClient(
  name: string,
  args: readonly string[],
): Promise<Record<string, unknown>[]> {
  const child = await new Deno.Command("deno", {
    args: [
      "run",
      "--lock=tests/deno.lock",
      "--no-prompt",
      "--allow-net=127.0.0.1",
      "--allow-sys=hostname",
      "--allow-env",
      "--allow-read",
      `tests/fixtures/${name}.ts`,
      ...args,
    ],
    cwd: ROOT,
    stdout: "piped",
    stderr: "piped",
  }).output();
  assert.equal(child.code, 0, new TextDecoder().decode(child.stderr));
  return new TextDecoder().decode(child.stdout).trim().split("\n").map((line) => JSON.parse(line));
}

export { OpenAI };
