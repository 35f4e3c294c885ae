import assert from "node:assert/strict";
import { Authenticator, timingSafeEqual } from "../src/http/auth.ts";
import { HttpError } from "../src/http/errors.ts";

const ALICE = "tok-alice-0123456789abcdef";
const BOB = "tok-bob-fedcba9876543210";

function requestWith(authorization?: string): Request {
  const headers: Record<string, string> = authorization === undefined ? {} : { authorization };
  return new Request("http://localhost/v1/sessions", { headers });
}

function unauthorized(authenticator: Authenticator, request: Request, message: string): HttpError {
  let caught: unknown;
  try {
    authenticator.authenticate(request);
  } catch (error) {
    caught = error;
  }
  assert.ok(caught instanceof HttpError, `expected an HttpError, got ${caught}`);
  assert.equal(caught.status, 401);
  assert.equal(caught.code, "unauthorized");
  assert.equal(caught.message, message);
  assert.equal(caught.headers["WWW-Authenticate"], "Bearer");
  return caught;
}

Deno.test("timingSafeEqual() is true exactly for equal strings, whatever their lengths", () => {
  assert.equal(timingSafeEqual("", ""), true);
  assert.equal(timingSafeEqual("secret", "secret"), true);
  assert.equal(timingSafeEqual("secret", "secreT"), false);
  assert.equal(timingSafeEqual("Secret", "secret"), false);
  assert.equal(timingSafeEqual("secret", "secret2"), false);
  assert.equal(timingSafeEqual("secret2", "secret"), false);
  assert.equal(timingSafeEqual("", "x"), false);
  assert.equal(timingSafeEqual("a\0", "a"), false, "a trailing zero byte is not padding");
});

Deno.test("timingSafeEqual() compares UTF-8 bytes, so unicode strings compare by content", () => {
  assert.equal(timingSafeEqual("令牌-✓-🔑", "令牌-✓-🔑"), true);
  assert.equal(timingSafeEqual("令牌-✓-🔑", "令牌-✓-🔒"), false);
  assert.equal(timingSafeEqual("é", "e\u0301"), false, "no normalization: different bytes");
  assert.equal(timingSafeEqual("ab", "\u6261"), false, "same UTF-16 length, different bytes");
});

Deno.test("Authenticator without tokens is disabled and every request is user local", () => {
  const authenticator = new Authenticator([]);
  assert.equal(authenticator.enabled, false);
  assert.equal(authenticator.authenticate(requestWith()), "local");
  assert.equal(authenticator.authenticate(requestWith("Bearer anything")), "local");
});

Deno.test("Authenticator maps each configured Bearer token to its user, scheme in any case", () => {
  const authenticator = new Authenticator([{ token: ALICE, userId: "alice" }, { token: BOB, userId: "bob" }]);
  assert.equal(authenticator.enabled, true);
  assert.equal(authenticator.authenticate(requestWith(`Bearer ${ALICE}`)), "alice");
  assert.equal(authenticator.authenticate(requestWith(`Bearer ${BOB}`)), "bob");
  assert.equal(authenticator.authenticate(requestWith(`bearer ${BOB}`)), "bob");
  assert.equal(authenticator.authenticate(requestWith(`BEARER   ${ALICE}  `)), "alice");
});

Deno.test("Authenticator answers 401 for a missing header, another scheme or no token", async () => {
  const authenticator = new Authenticator([{ token: ALICE, userId: "alice" }]);
  const missing = "Missing Authorization: Bearer token";
  const error = unauthorized(authenticator, requestWith(), missing);
  unauthorized(authenticator, requestWith(`Basic ${btoa(`alice:${ALICE}`)}`), missing);
  unauthorized(authenticator, requestWith(ALICE), missing);
  unauthorized(authenticator, requestWith("Bearer"), missing);
  unauthorized(authenticator, requestWith("Bearer   "), missing);

  const response = error.response();
  assert.equal(response.status, 401);
  assert.equal(response.headers.get("www-authenticate"), "Bearer");
  assert.deepEqual(await response.json(), { error: { code: "unauthorized", message: missing } });
});

Deno.test("Authenticator rejects an unknown token with 401 and never echoes it", () => {
  const authenticator = new Authenticator([{ token: ALICE, userId: "alice" }, { token: BOB, userId: "bob" }]);
  const guesses = ["tok-mallory-secret-guess", ALICE.slice(0, -1), ALICE + "x", BOB.toUpperCase(), "zz9"];
  for (const guess of guesses) {
    const error = unauthorized(authenticator, requestWith(`Bearer ${guess}`), "Unknown API token");
    assert.ok(!JSON.stringify({ message: error.message, headers: error.headers }).includes(guess));
  }
});

Deno.test("Authenticator finds the matching token at any position among many", () => {
  const tokens = Array.from(
    { length: 12 },
    (_, i) => ({ token: `token-${i}-${"k".repeat(i * 7)}`, userId: `u${i}` }),
  );
  const authenticator = new Authenticator(tokens);
  for (const { token, userId } of tokens) {
    assert.equal(authenticator.authenticate(requestWith(`Bearer ${token}`)), userId);
  }
  // A prefix of the first token, or the last token with a suffix, matches none of them.
  unauthorized(authenticator, requestWith(`Bearer ${tokens[0].token.slice(0, 7)}`), "Unknown API token");
  unauthorized(authenticator, requestWith(`Bearer ${tokens[11].token}0`), "Unknown API token");
});

Deno.test("Authenticator rejects an empty or duplicate token without naming it", () => {
  assert.throws(() => new Authenticator([{ token: "", userId: "a" }]), TypeError);
  assert.throws(() => new Authenticator([{ token: ALICE, userId: "" }]), TypeError);
  assert.throws(
    () => new Authenticator([{ token: ALICE, userId: "alice" }, { token: ALICE, userId: "bob" }]),
    (error: unknown) =>
      error instanceof TypeError &&
      error.message === "Cannot configure API tokens: token #2 is the same as token #1",
  );
});
