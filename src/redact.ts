/**
 * The one place secrets are taken out of text: every message, trace string and log line that could carry an
 * API key or token passes through {@linkcode redact}.
 * @module
 */

/** What a secret is replaced with. */
export const REDACTED = "[redacted]";

/** `text` with every occurrence of each non-empty secret replaced by `[redacted]`. */
export function redact(text: string, secrets: readonly string[]): string {
  let out = text;
  for (const secret of secrets) if (secret !== "") out = out.replaceAll(secret, REDACTED);
  return out;
}
