/**
 * The one place secrets are taken out of text: every message, trace string and log line that could carry an
 * API key or token passes through {@linkcode redact}.
 * @module
 */

/** What a secret is replaced with. */
export const REDACTED = "[redacted]";

/** Options of {@linkcode redact}. */
export interface RedactOptions {
  /**
   * Also take out what looks like a key or token though it was not named: a known key's shape (`sk-…`,
   * `ghp_…`, `xoxb-…`, `AKIA…`, a JWT), the value after `Bearer`/`Basic` or after a name with `key`, `token`,
   * `secret` or `password` in it and `=` or `:` (6 characters or more), and any run of 32 or more letters, digits, `-` and `_` that
   * mixes letters and digits. For text nobody vouches for, such as a child process's stderr.
   * @default {false}
   */
  tokenLike?: boolean;
}

/** Keys by their known shapes, and long runs that mix letters and digits. */
const TOKEN_SHAPES =
  /\b(?:sk|pk|rk)-[A-Za-z0-9_-]{16,}|\bgh[pousr]_[A-Za-z0-9]{20,}|\bgithub_pat_[A-Za-z0-9_]{20,}|\bxox[abprs]-[A-Za-z0-9-]{10,}|\bAKIA[0-9A-Z]{16}\b|\beyJ[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]{8,}\.[A-Za-z0-9_-]*|(?<![A-Za-z0-9_-])(?=[A-Za-z_-]*[0-9])(?=[0-9_-]*[A-Za-z])[A-Za-z0-9_-]{32,}/g;
/** A scheme's credentials, and `name=value` / `name: value` where the name says it is a secret. */
const LABELLED =
  /\b(Bearer|Basic)(\s+)[A-Za-z0-9._~+\/=-]{6,}|\b([A-Za-z0-9_-]*(?:key|token|secret|passw(?:or)?d)[A-Za-z0-9_-]*)(["']?\s*[:=]\s*["']?)[^\s"',;]{6,}/gi;

/** `text` with every occurrence of each non-empty secret replaced by `[redacted]` (and, if asked, token-likes). */
export function redact(text: string, secrets: readonly string[], options: RedactOptions = {}): string {
  const { tokenLike = false } = options;
  let out = text;
  for (const secret of secrets) if (secret !== "") out = out.replaceAll(secret, REDACTED);
  if (!tokenLike) return out;
  out = out.replace(
    LABELLED,
    (whole, scheme, space, name, separator) =>
      scheme !== undefined
        ? `${scheme}${space}${REDACTED}`
        : whole.endsWith(REDACTED)
        ? whole
        : `${name}${separator}${REDACTED}`,
  );
  return out.replace(TOKEN_SHAPES, REDACTED);
}
