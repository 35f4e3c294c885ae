/**
 * A quick look at the provider before the first question: `GET {baseUrl}/models` under a short deadline, so
 * a wrong `OPENAI_BASE_URL` or key is said at start-up rather than at the first turn.
 * @module
 */
import { apiKeySetting } from "../config.ts";
import { redact } from "../redact.ts";
import { connectCause, describeThrown } from "./_failure.ts";
import { DIALECTS, type HttpLLMOptions } from "./client.ts";

/** Options of {@linkcode probeProvider}: the key and fetch as the model client takes them, and a deadline. */
export interface ProbeOptions extends Pick<HttpLLMOptions, "apiKey" | "fetch" | "api"> {
  /** How long the provider has to answer, in milliseconds. @default {2000} */
  timeoutMs?: number;
}

/**
 * One line saying why the provider at `baseUrl` cannot be used, or null when it answered or might work: it
 * cannot be connected to, did not answer within `timeoutMs`, or refused the key (401, 403). It asks for the
 * models list as the wire format of `api` names it and sends the key as that format does (Messages:
 * `GET /v1/models` with `x-api-key`). A provider that does not serve it (404, any other answer) is taken as
 * reachable. Never throws; names the URL's origin
 * only (its path may be private) and never the key.
 */
export async function probeProvider(baseUrl: string, options: ProbeOptions = {}): Promise<string | null> {
  const { apiKey = "", timeoutMs = 2000, fetch = globalThis.fetch, api = "chat" } = options;
  const dialect = DIALECTS[api];
  const origin = new URL(baseUrl).origin;
  const headers = { ...dialect.headers, ...(apiKey === "" ? {} : dialect.auth(apiKey)) };
  const signal = AbortSignal.timeout(timeoutMs);
  const path = dialect.modelsPath;
  const setting = apiKeySetting(api);
  try {
    const response = await fetch(`${baseUrl.replace(/\/+$/, "")}${path}`, { headers, signal });
    await response.body?.cancel();
    if (response.status === 401 || response.status === 403) {
      return `${origin} refused the key (HTTP ${response.status} to GET ${path}): check ${setting}`;
    }
    return null;
  } catch (error) {
    if (signal.aborted) return `${origin} did not answer GET ${path} within ${timeoutMs / 1000} s`;
    const cause = connectCause(error) ?? redact(describeThrown(error), [apiKey]);
    return `cannot connect to ${origin}: ${cause}`;
  }
}
