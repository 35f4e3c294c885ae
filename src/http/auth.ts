/**
 * Bearer-token authentication against a fixed list of API tokens, in time that reveals neither which token
 * matched nor how long the tokens are.
 * @module
 */
import { createHash } from "node:crypto";
import { HttpError } from "./errors.ts";
import type { ApiToken } from "../config.ts";

const encoder = new TextEncoder();

/** Whether `a` and `b` have the same UTF-8 bytes, in time that depends only on the longer length. */
export function timingSafeEqual(a: string, b: string): boolean {
  const left = encoder.encode(a);
  const right = encoder.encode(b);
  const length = Math.max(left.length, right.length);
  // Zero-padded copies of one length, so the loop has no bounds branch.
  const x = new Uint8Array(length);
  const y = new Uint8Array(length);
  x.set(left);
  y.set(right);
  let diff = left.length ^ right.length;
  for (let i = 0; i < length; i++) diff |= x[i] ^ y[i];
  return diff === 0;
}

/** The user id of every request when no token is configured. */
export const LOCAL_USER_ID = "local";

/** Maps `Authorization: Bearer <token>` to a user id; with no tokens, every request is `"local"`. */
export class Authenticator {
  /** SHA-256 hex digests of the tokens, so every comparison is over 64 characters whatever the lengths. */
  #digests: readonly { digest: string; userId: string }[];

  /**
   * @throws {TypeError} when a token or user id is empty or not a string, or a token is configured twice
   * (the message gives the token's position, never the token).
   */
  constructor(tokens: readonly ApiToken[]) {
    const seen = new Map<string, number>();
    this.#digests = Object.freeze(tokens.map(({ token, userId }, index) => {
      const fail = (why: string) => new TypeError(`Cannot configure API tokens: ${why}`);
      if (typeof token !== "string" || token === "") {
        throw fail(`token #${index + 1} must be a non-empty string`);
      }
      if (typeof userId !== "string" || userId === "") {
        throw fail(`user id of token #${index + 1} must be non-empty`);
      }
      const digest = sha256(token);
      const first = seen.get(digest);
      if (first !== undefined) throw fail(`token #${index + 1} is the same as token #${first}`);
      seen.set(digest, index + 1);
      return { digest, userId };
    }));
  }

  /** Whether any token is configured; when not, {@linkcode Authenticator.authenticate} returns `"local"`. */
  get enabled(): boolean {
    return this.#digests.length > 0;
  }

  /**
   * The user id of `request`, its bearer token compared with every token without stopping at a match.
   * @throws {HttpError} 401 `unauthorized` with `WWW-Authenticate: Bearer` for a missing header or token,
   * another scheme, or an unknown token (never echoed).
   */
  authenticate(request: Request): string {
    if (!this.enabled) return LOCAL_USER_ID;
    const header = request.headers.get("authorization");
    const match = header === null ? null : /^(\S+)[ \t]+(\S.*)$/.exec(header);
    if (match === null || match[1].toLowerCase() !== "bearer") {
      throw unauthorized("Missing Authorization: Bearer token");
    }
    const digest = sha256(match[2].trim());
    let userId: string | null = null;
    for (const entry of this.#digests) {
      if (timingSafeEqual(digest, entry.digest)) userId = entry.userId;
    }
    if (userId === null) throw unauthorized("Unknown API token");
    return userId;
  }
}

function sha256(text: string): string {
  return createHash("sha256").update(text, "utf8").digest("hex");
}

function unauthorized(message: string): HttpError {
  return new HttpError(401, "unauthorized", message, { headers: { "WWW-Authenticate": "Bearer" } });
}
