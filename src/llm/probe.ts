/**
 * A quick look at the provider before the first question: `GET {baseUrl}/models` under a short deadline, so
 * a wrong `OPENAI_BASE_URL` or key is said at start-up rather than at the first turn.
 * @module
 */
import { redact } from "../redact.ts";
import { connectCause, describeThrown } from "./_failure.ts";
import type { HttpLLMOptions } from "./client.ts";

/** Options of {@linkcode probeProvider}: the key and fetch as the model client takes them, and a deadline. */
export interface ProbeOptions extends Pick<HttpLLMOptions, "apiKey" | "fetch"> {
  /** How long the provider has to answer, in milliseconds. @default {2000} */
  timeoutMs?: number;
}

/**
 * One line saying why the provider at `baseUrl` cannot be used, or null when it answered or might work: it
 * cannot be connected to, did not answer within `timeoutMs`, or refused the key (401, 403). A provider that
 * does not serve `/models` (404, any other answer) is taken as reachable. Never throws; names the URL's origin
 * only (its path may be private) and never the key.
 */
export async function probeProvider(baseUrl: string, options: ProbeOptions = {}): Promise<string | null> {
  const { apiKey = "", timeoutMs = 2000, fetch = globalThis.fetch } = options;
  const origin = new URL(baseUrl).origin;
  const headers: Record<string, string> = apiKey === "" ? {} : { Authorization: `Bearer ${apiKey}` };
  const signal = AbortSignal.timeout(timeoutMs);
  try {
    const response = await fetch(`${baseUrl.replace(/\/+$/, "")}/models`, { headers, signal });
    await response.body?.cancel();
    if (response.status === 401 || response.status === 403) {
      return `${origin} refused the key (HTTP ${response.status} to GET /models): check OPENAI_API_KEY`;
    }
    return null;
  } catch (error) {
    if (signal.aborted) return `${origin} did not answer GET /models within ${timeoutMs / 1000} s`;
    const cause = connectCause(error) ?? redact(describeThrown(error), [apiKey]);
    return `cannot connect to ${origin}: ${cause}`;
  }
}
