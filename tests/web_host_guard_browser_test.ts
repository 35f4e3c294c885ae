/// <reference lib="dom" />
/**
 * DNS rebinding in a real headless Chromium against a real `deno task serve` without tokens: a name that
 * resolves to 127.0.0.1 gets the 403 page, a page of another origin cannot post a turn, and the page keeps
 * working on `localhost` as on `127.0.0.1`. Ignored, with the reason printed, when no browser is installed.
 */
import assert from "node:assert/strict";
import { reason, texts, withPage } from "./_web_page.ts";

/** A page of another origin (another loopback port) that posts a turn to `target` as a rebound page would. */
function attackerPage(target: string) {
  const html = `<!doctype html><script>
    fetch(${JSON.stringify(`${target}/v1/sessions/rebound/messages`)}, {
      method: "POST", mode: "no-cors", headers: { "content-type": "text/plain" },
      body: JSON.stringify({ message: "what is 2+3?" }),
    }).then(() => { document.title = "sent"; }, () => { document.title = "failed"; });
  </script>`;
  const server = Deno.serve(
    { hostname: "127.0.0.1", port: 0, onListen() {} },
    () => new Response(html, { headers: { "content-type": "text/html" } }),
  );
  return { url: `http://127.0.0.1:${server.addr.port}/`, close: () => server.shutdown() };
}

Deno.test({
  name:
    "Chromium: a rebound name gets the 403, another origin's page posts nothing, localhost's page answers",
  ignore: reason !== null,
  async fn() {
    const rules = "--host-resolver-rules=MAP attacker.example 127.0.0.1";
    await withPage({}, async (page, url, { provider }) => {
      const port = new URL(url).port;
      const browser = page.browser();
      const other = await browser.newPage();
      // The rebound name: the browser connects to 127.0.0.1 and sends Host: attacker.example:<port>.
      const rebound = await other.goto(`http://attacker.example:${port}/`, { waitUntil: "load" });
      assert.equal(rebound?.status(), 403);
      const shown = await other.evaluate(() => document.body.textContent ?? "");
      assert.match(shown, /"host_not_allowed"/);
      assert.match(shown, /Host \\"attacker\.example:\d+\\" is not served: without API tokens/);

      const attacker = attackerPage(url);
      try {
        await other.goto(attacker.url, { waitUntil: "load" });
        await other.waitForFunction(() => document.title !== "");
      } finally {
        await attacker.close();
      }
      await other.close();
      const sessions = await (await fetch(`${url}/v1/sessions`)).json();
      assert.deepEqual(sessions.sessions, [], "the other origin's post ran no turn");
      assert.equal(provider.requests.length, 0, "no model call");

      await page.goto(`http://localhost:${port}/`, { waitUntil: "load" });
      await page.waitForSelector("#input");
      await page.type("#input", "what is 2+3?");
      await page.keyboard.press("Enter");
      await page.waitForFunction(() =>
        [...document.querySelectorAll(".msg.assistant .text")].some((n) => n.textContent?.includes("5"))
      );
      assert.deepEqual(await texts(page, ".msg.assistant .text"), ["The answer is 5."]);
    }, { browserArgs: [rules] });
  },
});
