/**
 * A client that stops reading an SSE response is held a bounded number of bytes, never a whole turn: past
 * `maxUnreadBytes` its stream ends in an error and later frames are dropped (the producer learns it from
 * `send`). A client that reads gets every frame, however many.
 */
import assert from "node:assert/strict";
import { MAX_UNREAD_SSE_BYTES, sseResponse } from "../src/http/sse.ts";

const FRAME = "x".repeat(1000);

Deno.test("sseResponse() holds a client that reads nothing at most its bound plus one frame, then lets it go", async () => {
  const sent: boolean[] = [];
  const response = sseResponse(
    (send) => {
      for (let i = 0; i < 100; i++) sent.push(send(FRAME, "delta"));
      return Promise.resolve();
    },
    () => {},
    {},
    { maxUnreadBytes: 10_000 },
  );
  // Each frame is `event: delta\ndata: …\n\n`, 1,021 bytes: the tenth crosses 10,000, the eleventh is dropped.
  assert.equal(sent.indexOf(false), 10);
  assert.ok(sent.slice(10).every((ok) => !ok), "every later frame is dropped");
  await assert.rejects(response.text(), /the client left over 10000 bytes of frames unread/);
});

Deno.test("sseResponse() gives a client that reads every frame, past the bound many times over", async () => {
  const response = sseResponse(
    async (send) => {
      for (let i = 0; i < 200; i++) {
        assert.equal(send(FRAME, "delta"), true);
        await new Promise((resolve) => setTimeout(resolve, 0));
      }
    },
    () => {},
    {},
    { maxUnreadBytes: 10_000 },
  );
  const text = await response.text();
  assert.equal(text.split("\n\n").filter((frame) => frame !== "").length, 200);
});

Deno.test("a real client that stops reading over loopback is let go once the server holds the bound: memory stays bounded", async () => {
  let dropped = false;
  let sentBytes = 0;
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen: () => {} },
    () =>
      sseResponse(async (send) => {
        // Frames until one is dropped; far more than the socket buffers and the bound together.
        while (sentBytes < 512 * 1024 * 1024) {
          if (!send("y".repeat(16_000), "delta")) {
            dropped = true;
            return;
          }
          sentBytes += 16_000;
          await new Promise((resolve) => setTimeout(resolve, 0));
        }
      }, () => {}),
  );
  const connection = await Deno.connect({ hostname: "127.0.0.1", port: server.addr.port });
  try {
    await connection.write(new TextEncoder().encode("GET / HTTP/1.1\r\nHost: 127.0.0.1\r\n\r\n"));
    // The client reads nothing: the kernel's buffers fill, then the response's queue.
    while (!dropped && sentBytes < 512 * 1024 * 1024) await new Promise((resolve) => setTimeout(resolve, 5));
    assert.equal(dropped, true, `the stalled client was let go (after ${sentBytes} bytes)`);
    assert.ok(sentBytes >= MAX_UNREAD_SSE_BYTES, `the bound was reached first: ${sentBytes} bytes`);
  } finally {
    connection.close();
    await server.shutdown();
  }
});
