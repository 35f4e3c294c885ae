/** HEAD through the real handler: the GET route's status and headers, never a body. */
import assert from "node:assert/strict";
import { httpHarness, postMessage } from "./_http_harness.ts";

const request = (path: string, method: string) => new Request(`http://agent.test${path}`, { method });

Deno.test("HEAD answers like GET without a body on /healthz, /openapi.json, sessions and a trace", async () => {
  using h = httpHarness();
  await (await h.handler(postMessage("s1", { message: "hello" }))).body?.cancel();
  for (
    const path of ["/healthz", "/openapi.json", "/v1/sessions", "/v1/sessions/s1", "/v1/sessions/s1/trace"]
  ) {
    const got = await h.handler(request(path, "GET"));
    const head = await h.handler(request(path, "HEAD"));
    assert.equal(head.status, 200, path);
    assert.equal(await head.text(), "", `${path} has no body`);
    assert.equal(head.headers.get("content-type"), got.headers.get("content-type"), path);
    assert.notEqual(await got.text(), "");
  }
  const missing = await h.handler(request("/v1/sessions/nope", "HEAD"));
  assert.equal(missing.status, 404);
  assert.equal(await missing.text(), "");
  assert.match(h.logs.join("\n"), /^HEAD \/healthz 200 \d+ms$/m);
});

Deno.test("HEAD where there is no GET is 405, and every Allow list with GET names HEAD", async () => {
  using h = httpHarness();
  const post = await h.handler(request("/v1/sessions/s1/messages", "HEAD"));
  assert.equal(post.status, 405);
  assert.equal(post.headers.get("allow"), "POST");
  const put = await h.handler(request("/v1/sessions/s1/todos", "PUT"));
  assert.equal(put.headers.get("allow"), "GET, HEAD");
  await put.body?.cancel();
});
