/// <reference lib="dom" />
/**
 * The web page in a real headless Chromium against a real `deno task serve` and the fake provider: a streamed
 * answer with its tool call, the run's timeline, a reload, a model answer that is markup, and the token form.
 * Screenshots go to tests/artifacts/ (git-ignored). Ignored, with the reason printed, when no browser is
 * installed (`.ci/run` installs Debian's chromium-headless-shell).
 */
import assert from "node:assert/strict";
import { ARTIFACTS, reason, texts, withPage } from "./_web_page.ts";

const TOKEN = "web-test-token-0123456789";

Deno.test({
  name: "the page streams an answer with its tool call, shows the run's timeline, and keeps the session",
  ignore: reason !== null,
  async fn() {
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    await withPage({}, async (page, url, { serve, provider, dialogs }) => {
      await page.goto(`${url}/`, { waitUntil: "load" });
      await page.waitForSelector("#input");
      // The model holds its answer after the first word: the page must show that word before the rest exists.
      let release!: () => void;
      provider.hold = new Promise((resolve) => (release = resolve));
      await page.type("#input", "what is 12*(3+4)?");
      await page.keyboard.press("Enter");
      await page.waitForFunction(() =>
        document.querySelector(".msg.streaming .text")?.textContent === "The "
      );
      release();
      provider.hold = null;
      await page.waitForFunction(
        () =>
          [...document.querySelectorAll(".msg.assistant .text")].some((n) => n.textContent?.includes("84")),
      );
      assert.deepEqual(await texts(page, ".msg.assistant .text"), ["The answer is 84."]);
      const tool = await page.$eval('details.tool[data-tool="calculator"]', (node) => ({
        status: (node as HTMLElement).dataset.status,
        args: node.querySelector(".tool-args")?.textContent,
        result: node.querySelector(".tool-result")?.textContent,
      }));
      assert.deepEqual(tool.status, "ok");
      assert.match(tool.args ?? "", /12\*\(3\+4\)/);
      assert.match(tool.result ?? "", /84/);
      await page.click('details.tool[data-tool="calculator"] summary');
      await page.screenshot({ path: `${ARTIFACTS}chat.png` });

      await page.click(".run-end button");
      await page.waitForSelector(".timeline-row");
      const kinds = await page.$$eval(
        ".timeline-row",
        (rows) => rows.map((row) => (row as HTMLElement).dataset.kind),
      );
      assert.equal(kinds.filter((kind) => kind === "llm").length, 2, kinds.join());
      assert.equal(kinds.filter((kind) => kind === "tool").length, 1, kinds.join());
      const [totals] = await texts(page, ".timeline-totals");
      assert.match(totals, /answered · \d+ ms · 2 step\(s\) · 1 tool call\(s\) · 30 tokens/);
      const panel = await page.$("#timeline-panel");
      await panel!.screenshot({ path: `${ARTIFACTS}timeline.png` });

      await page.reload({ waitUntil: "load" });
      await page.waitForFunction(() => document.querySelectorAll(".msg.assistant").length > 0);
      assert.deepEqual(await texts(page, ".msg.user"), ["what is 12*(3+4)?"]);
      assert.match((await texts(page, ".msg.assistant .text")).join(), /84/);
      assert.match((await texts(page, ".session.current")).join(), /1 turn\(s\)/);
      assert.equal((await texts(page, ".timeline-row")).length, 4, "the timeline is back after the reload");

      const payload = "<img src=x onerror=alert(1)>";
      await page.type("#input", `say: ${payload}`);
      await page.keyboard.press("Enter");
      await page.waitForFunction(
        (text) => [...document.querySelectorAll(".msg.assistant .text")].some((n) => n.textContent === text),
        {},
        payload,
      );
      // No img element was made of it, so there is no onerror left to run later: nothing to wait for.
      assert.equal(await page.$$eval(".messages img", (nodes) => nodes.length), 0);
      assert.deepEqual(dialogs, [], "no script ran");

      await page.setViewport({ width: 390, height: 844 });
      const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
      assert.ok(overflow <= 390, `no sideways scrolling on a phone, got ${overflow}px`);
      await page.screenshot({ path: `${ARTIFACTS}chat_phone.png` });
      assert.doesNotMatch(serve.stderr(), /error/i);
    });
  },
});

Deno.test({
  name:
    "on a server with tokens the page asks for one, says when it is wrong, keeps it out of URLs, and deletes after a confirmation",
  ignore: reason !== null,
  async fn() {
    await withPage({ AGENT_API_TOKENS: `${TOKEN}:alice` }, async (page, url, { serve, dialogs }) => {
      await page.goto(`${url}/`, { waitUntil: "load" });
      await page.waitForSelector("#login:not([hidden])");
      assert.match((await texts(page, "#login-error")).join(), /needs an API token/);
      await page.type("#token", "not-the-token-0123456789");
      await page.keyboard.press("Enter");
      await page.waitForFunction(() =>
        /did not accept/.test(document.querySelector("#login-error")?.textContent ?? "")
      );
      assert.match(
        (await texts(page, "#login-error")).join(),
        /did not accept this token \(Unknown API token\)/,
      );
      await page.screenshot({ path: `${ARTIFACTS}wrong_token.png` });

      await page.type("#token", TOKEN);
      await page.keyboard.press("Enter");
      await page.waitForSelector("#app:not([hidden])");
      // The page opens a session once the list arrives; a message sent before that waits in the box.
      await page.waitForFunction(() => document.querySelector("#session-id")?.textContent !== "");
      await page.type("#input", "hello");
      await page.keyboard.press("Enter");
      await page.waitForFunction(() =>
        document.querySelector(".msg.assistant")?.textContent === "echo: hello"
      );
      const stored = await page.evaluate(() => sessionStorage.getItem("mini-agent.token"));
      assert.equal(stored, TOKEN);
      assert.ok(!page.url().includes(TOKEN));
      assert.ok(!serve.stderr().includes(TOKEN), "the token is never logged");

      // The page re-reads the session once the turn ends (its run then in the run list): deleting it before
      // that read is done would make the read a 404.
      await page.waitForSelector("#run-select option");
      await page.waitForSelector(".session .delete");
      await page.click(".session .delete");
      await page.waitForFunction(() => document.querySelectorAll("#session-list .session").length === 0);
      assert.equal(dialogs.length, 1);
      assert.match(dialogs[0], /^confirm: Delete session "web-.*" with its messages/);
      assert.deepEqual(
        await texts(page, ".msg"),
        [],
        "the open session was the deleted one: a new one opens",
      );
    });
  },
});
