/// <reference lib="dom" />
/**
 * The web page as a daily chat, in a real headless Chromium against a real `serve`: it reopens the last
 * session and names sessions from their first question (renamable, the title kept by the server, so another
 * browser sees it), says what to do when empty, shows the
 * running step while a turn runs (the model held at a loopback gate, so each step is seen before the next
 * exists) with the timeline filling in, stops on Esc, renders answers as markdown with hostile markdown
 * inert, and opens a long session at its newest exchange. Screenshots at 1400 and 390 px go to
 * tests/artifacts/. Ignored, with the reason printed, when no browser is installed.
 */
import assert from "node:assert/strict";
import { ARTIFACTS, reason, texts, withPage } from "./_web_page.ts";
import { until } from "./_http_harness.ts";
import type { Page } from "./_dev_deps.ts";

const WIDE = { width: 1400, height: 900 };
const PHONE = { width: 390, height: 844 };

/** A loopback gate in front of the model: while `hold` is set, each request waits for it before going on. */
class ModelGate {
  readonly url: string;
  /** The provider's base URL the requests go on to. */
  target = "";
  /** Requests that reached the gate so far. */
  arrived = 0;
  hold: Promise<void> | null = null;
  #server: Deno.HttpServer<Deno.NetAddr>;

  constructor() {
    this.#server = Deno.serve({ hostname: "127.0.0.1", port: 0, onListen: () => {} }, async (request) => {
      const body = await request.text();
      this.arrived++;
      if (this.hold !== null) await this.hold;
      const path = new URL(request.url).pathname.replace(/^\/v1/, "");
      try {
        return await fetch(this.target + path, {
          method: request.method,
          headers: { "content-type": "application/json" },
          body,
        });
      } catch {
        return new Response("the provider is gone", { status: 502 });
      }
    });
    this.url = `http://127.0.0.1:${this.#server.addr.port}/v1`;
  }

  close(): Promise<void> {
    return this.#server.shutdown();
  }
}

/** A promise and the function that settles it. */
function held(): { promise: Promise<void>; release: () => void } {
  let release!: () => void;
  const promise = new Promise<void>((resolve) => (release = resolve));
  return { promise, release };
}

/** Screenshots the page at 1400 px and at 390 px as `NAME_1400.png` and `NAME_390.png`, back at 1400 after. */
async function screenshots(page: Page, name: string): Promise<void> {
  await page.setViewport(WIDE);
  await page.screenshot({ path: `${ARTIFACTS}${name}_1400.png` });
  await page.setViewport(PHONE);
  await page.screenshot({ path: `${ARTIFACTS}${name}_390.png` });
  const overflow = await page.evaluate(() => document.documentElement.scrollWidth);
  assert.ok(overflow <= PHONE.width, `no sideways scrolling on a phone (${name}), got ${overflow}px`);
  await page.setViewport(WIDE);
}

/** Types `text` into the composer (newlines included) and sends it with Enter. */
async function send(page: Page, text: string): Promise<void> {
  await page.$eval("#input", (node, value) => ((node as HTMLTextAreaElement).value = value), text);
  await page.focus("#input");
  await page.keyboard.press("Enter");
}

/** The id of the open session, from the address. */
function openId(page: Page): string {
  return decodeURIComponent(new URL(page.url()).hash.slice(1));
}

/** Loads the page afresh at `url` (a plain `/` reopens the last session). */
async function visit(page: Page, url: string): Promise<void> {
  await page.goto("about:blank");
  await page.goto(url, { waitUntil: "load" });
  await page.waitForFunction(() => document.querySelector("#session-title")?.textContent !== "");
}

async function pressCtrlK(page: Page): Promise<void> {
  await page.keyboard.down("Control");
  await page.keyboard.press("k");
  await page.keyboard.up("Control");
}

/** Sends `message` to session `id` through the API, without the page. */
async function post(url: string, id: string, message: string): Promise<void> {
  const response = await fetch(`${url}/v1/sessions/${encodeURIComponent(id)}/messages`, {
    method: "POST",
    headers: { "content-type": "application/json" },
    body: JSON.stringify({ message }),
  });
  assert.equal(response.status, 200, await response.clone().text());
  await response.body?.cancel();
}

Deno.test({
  name:
    "the page reopens the last session, names sessions from their first question, renames them, and says what to do when empty",
  ignore: reason !== null,
  async fn() {
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    await withPage({}, async (page, url) => {
      await page.setViewport(WIDE);
      await visit(page, `${url}/`);
      await page.waitForSelector(".empty");
      assert.match((await texts(page, ".empty")).join(), /Ask anything below.*Esc stops.*Ctrl\+K/s);
      assert.deepEqual(await texts(page, "#session-title"), ["New session"]);
      assert.deepEqual(await texts(page, "#session-list li"), ["No sessions yet."]);
      await screenshots(page, "empty");

      await send(page, "what is 12*(3+4)?");
      await page.waitForFunction(() =>
        document.querySelector(".msg.assistant .text")?.textContent?.includes("84")
      );
      assert.equal(await page.$(".empty"), null, "the empty state went with the first question");
      const first = openId(page);
      assert.deepEqual(await texts(page, "#session-title"), ["what is 12*(3+4)?"]);
      await page.waitForFunction(() =>
        document.querySelector(".session .open")?.textContent === "what is 12*(3+4)?"
      );

      // Ctrl+K opens a new, empty session; a question there names it.
      await pressCtrlK(page);
      await page.waitForSelector(".empty");
      const second = openId(page);
      assert.notEqual(second, first);
      assert.deepEqual(await texts(page, "#session-title"), ["New session"]);
      await send(page, "hello\nand more on a second line");
      await page.waitForFunction(() => document.querySelectorAll(".run-end").length === 1);
      assert.deepEqual(await texts(page, "#session-title"), ["hello"]);

      // A new visit to the page reopens the session used last, not a new one.
      await visit(page, `${url}/`);
      await page.waitForSelector(".msg.user");
      assert.equal(openId(page), second);
      assert.deepEqual(await texts(page, ".msg.user"), ["hello\nand more on a second line"]);
      await page.click(`.session .open[title="${first}"]`);
      await page.waitForFunction(() =>
        document.querySelector(".msg.user")?.textContent === "what is 12*(3+4)?"
      );
      await visit(page, `${url}/`);
      await page.waitForSelector(".msg.user");
      assert.equal(openId(page), first);
      assert.deepEqual(await texts(page, ".session .open"), ["hello", "what is 12*(3+4)?"], "newest first");

      // Rename: Enter keeps the new title (in the list too, after a reload, and in another browser); Esc drops
      // an edit.
      await page.click("#rename");
      await page.waitForSelector("#title-input:not([hidden])");
      assert.equal(
        await page.$eval("#title-input", (n) => (n as HTMLInputElement).value),
        "what is 12*(3+4)?",
      );
      await page.keyboard.down("Control");
      await page.keyboard.press("a");
      await page.keyboard.up("Control");
      await page.keyboard.type("Arithmetic");
      await page.keyboard.press("Enter");
      await page.waitForFunction(() =>
        document.querySelector("#session-title")?.textContent === "Arithmetic"
      );
      await page.waitForFunction(() =>
        [...document.querySelectorAll(".session .open")].some((n) => n.textContent === "Arithmetic")
      );
      await page.click("#rename");
      await page.keyboard.type(" and more");
      await page.keyboard.press("Escape");
      assert.deepEqual(await texts(page, "#session-title"), ["Arithmetic"]);
      assert.equal(await page.$eval("#title-input", (n) => (n as HTMLElement).hidden), true);
      await visit(page, `${url}/`);
      assert.deepEqual(await texts(page, "#session-title"), ["Arithmetic"]);
      // A fresh browser context (no storage of this one's) sees the title the server keeps, in the list and
      // in the header.
      const other = await page.browser().createBrowserContext();
      try {
        const fresh = await other.newPage();
        await fresh.setViewport(WIDE);
        await visit(fresh, `${url}/#${encodeURIComponent(first)}`);
        await fresh.waitForSelector(".msg.user");
        await fresh.waitForFunction(() =>
          document.querySelector("#session-title")?.textContent === "Arithmetic"
        );
        assert.deepEqual(await texts(fresh, ".session .open"), ["hello", "Arithmetic"]);
        assert.deepEqual(
          await fresh.evaluate(() => Object.keys(localStorage)),
          ["mini-agent.last-session"],
          "the page keeps nothing but the last session",
        );
      } finally {
        await other.close();
      }
      // A blank title names the session from its first question again.
      await page.click("#rename");
      await page.keyboard.press("Backspace");
      await page.keyboard.press("Enter");
      await page.waitForFunction(() =>
        document.querySelector("#session-title")?.textContent === "what is 12*(3+4)?"
      );

      // A session started through the API is named from its first question when it is opened here.
      await post(url, "from-the-api", "plan the trip\nwith every detail");
      await visit(page, `${url}/#from-the-api`);
      await page.waitForSelector(".msg.user");
      assert.deepEqual(await texts(page, "#session-title"), ["plan the trip"]);
      assert.deepEqual(await texts(page, ".session.current .open"), ["plan the trip"]);
      await screenshots(page, "titles");

      // A new session left unused is not reopened: the newest stored one is.
      await pressCtrlK(page);
      await page.waitForSelector(".empty");
      await visit(page, `${url}/`);
      await page.waitForSelector(".msg.user");
      assert.equal(openId(page), "from-the-api");
    });
  },
});

Deno.test({
  name:
    "while a turn runs the page shows its running step and fills the timeline, before the answer exists; Esc stops it",
  ignore: reason !== null,
  async fn() {
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    const gate = new ModelGate();
    const holds: { release: () => void }[] = [];
    const hold = () => {
      const h = held();
      holds.push(h);
      gate.hold = h.promise;
      return h;
    };
    try {
      await withPage({ OPENAI_BASE_URL: gate.url }, async (page, url, { provider, serve }) => {
        gate.target = provider.url;
        await page.setViewport(WIDE);
        await visit(page, `${url}/`);
        await page.waitForSelector(".empty");
        // Every text the running-step line shows, in order (each is a new text node).
        await page.evaluate(() => {
          const seen: string[] = [];
          (window as unknown as { steps: string[] }).steps = seen;
          new MutationObserver((records) => {
            for (const record of records) {
              if (!(record.target instanceof Element) || record.target.closest(".progress") === null) {
                continue;
              }
              for (const node of record.addedNodes) {
                if (node.nodeType === Node.TEXT_NODE) seen.push(node.textContent!);
              }
            }
          }).observe(document.querySelector("#messages")!, { subtree: true, childList: true });
        });
        const steps = () => page.evaluate(() => (window as unknown as { steps: string[] }).steps);

        // The first model call is held: the page says the model is thinking, and the timeline has the run.
        const firstCall = hold();
        await send(page, "what is 12*(3+4)?");
        await until(() => gate.arrived === 1, "the first model call", 30_000);
        await page.waitForFunction(() => document.querySelector(".progress")?.textContent === "thinking…");
        assert.equal(await page.$(".msg.assistant"), null, "no answer yet");
        assert.equal(await page.$eval("#stop", (n) => (n as HTMLElement).hidden), false, "Stop shows");
        await page.waitForFunction(() =>
          /running/.test(document.querySelector(".timeline-totals")?.textContent ?? "")
        );
        await screenshots(page, "progress_thinking");

        // The model called the calculator; the next model call is held: the call and its result are shown,
        // and the timeline has the model call and the tool call while the turn still runs.
        const secondCall = hold();
        firstCall.release();
        await until(() => gate.arrived === 2, "the second model call", 30_000);
        await page.waitForSelector('details.tool[data-tool="calculator"][data-status="ok"]');
        await page.waitForFunction(() => document.querySelectorAll(".timeline-row").length === 2);
        assert.deepEqual(
          await page.$$eval(".timeline-row", (rows) => rows.map((r) => (r as HTMLElement).dataset.kind)),
          ["llm", "tool"],
        );
        assert.match((await texts(page, ".timeline-totals")).join(), /running/);
        assert.deepEqual(await texts(page, ".progress"), ["thinking…"]);
        assert.deepEqual(await steps(), ["calling calculator…", "thinking…"], "the step was shown as it ran");
        await screenshots(page, "progress_tool");

        // The answer streams: its first word, then the provider holds the rest.
        gate.hold = null;
        const rest = held();
        holds.push(rest);
        provider.hold = rest.promise;
        secondCall.release();
        await page.waitForFunction(() =>
          document.querySelector(".msg.streaming .text")?.textContent === "The "
        );
        assert.deepEqual(await texts(page, ".progress"), ["writing…"]);
        await screenshots(page, "progress_writing");
        rest.release();
        provider.hold = null;
        await page.waitForSelector(".run-end");
        assert.deepEqual(await texts(page, ".msg.assistant .text"), ["The answer is 84."]);
        assert.equal(await page.$(".progress"), null, "nothing runs any more");
        assert.deepEqual(await steps(), ["calling calculator…", "thinking…", "writing…"]);
        await page.waitForFunction(() =>
          /answered/.test(document.querySelector(".timeline-totals")?.textContent ?? "")
        );

        // Esc stops a running turn: cancelled on the server, taken back.
        const never = hold();
        await send(page, "say: never answered");
        await until(() => gate.arrived === 3, "the third model call", 30_000);
        await page.waitForSelector(".progress");
        await page.keyboard.press("Escape");
        await page.waitForFunction(() => document.querySelectorAll(".run-end").length === 2);
        assert.match((await texts(page, ".run-end")).at(-1)!, /^aborted/);
        assert.equal(await page.$(".progress"), null);
        await page.waitForFunction(() => (document.querySelector("#stop") as HTMLElement).hidden);
        // A Stop the user asked for says so once, quietly: no error, nothing to retry.
        await page.waitForSelector(".marker.stopped");
        assert.deepEqual(await texts(page, ".marker.stopped"), ["stopped"]);
        assert.deepEqual(await texts(page, ".msg.error"), []);
        assert.equal(await page.$("button.retry"), null);
        never.release();
        // The access log is written in batches: its line may come after the page has seen the run end.
        await until(
          () => /POST \/v1\/sessions\/\S+\/cancel 202/.test(serve.stderr()),
          "the cancel's log line",
          30_000,
        );
        const session = await (await fetch(`${url}/v1/sessions/${openId(page)}`)).json();
        assert.deepEqual(
          session.messages.filter((m: { role: string }) => m.role === "user").map((m: { content: string }) =>
            m.content
          ),
          ["what is 12*(3+4)?"],
          "the stopped turn was taken back",
        );
      });
    } finally {
      for (const h of holds) h.release();
      await gate.close();
    }
  },
});

Deno.test({
  name:
    "with AGENT_SHOW_THINKING the page says 'reasoning…' while the model's reasoning streams in, and never shows it",
  ignore: reason !== null,
  async fn() {
    const thought = "PRIVATE-THOUGHT of the model";
    const rest = held();
    try {
      await withPage({ AGENT_SHOW_THINKING: "1" }, async (page, url, { provider }) => {
        await page.setViewport(WIDE);
        await visit(page, `${url}/`);
        await page.waitForSelector(".empty");
        provider.hold = rest.promise;
        await send(page, "say: Thought it through.");
        await page.waitForFunction(() => document.querySelector(".progress")?.textContent === "reasoning…");
        assert.equal(await page.$(".msg.assistant"), null, "no answer yet");
        await screenshots(page, "progress_reasoning");
        rest.release();
        await page.waitForSelector(".run-end");
        assert.deepEqual(await texts(page, ".msg.assistant .text"), ["Thought it through."]);
        const shown = await page.evaluate(() => document.documentElement.outerHTML);
        assert.ok(!shown.includes(thought), "the reasoning's text is nowhere on the page");
      }, { provider: { reasoning: thought } });
    } finally {
      rest.release();
    }
  },
});

const MARKDOWN = [
  "## Shopping",
  "Buy **milk** and *eggs*, see [the shop](https://shop.example/milk) or <https://a.example>.",
  "- one `x * y`",
  "- two",
  "  - nested",
  "3. third",
  "> quoted **bold**",
  "",
  "```js",
  'const tag = "<b>";',
  "```",
].join("\n");

const HOSTILE = [
  "[click](javascript:alert(1)) [upper](JaVaScRiPt:alert(2)) [spaced]( javascript:alert(3))",
  "[data](data:text/html,<script>alert(4)</script>) [rel](/v1/sessions) [mail](mailto:a@b.example)",
  "<script>alert(5)</script> <img src=x onerror=alert(6)> <a href=javascript:alert(7)>a</a>",
  '[a [nested [deep]]](http://ok.example/x "t") ![pic](https://img.example/p.png) <javascript:alert(8)>',
  "[**[inner](https://inner.example)**](https://outer.example)",
].join("\n");

Deno.test({
  name:
    "answers show as rendered markdown, hostile markdown stays inert, and a long session opens at its newest exchange",
  ignore: reason !== null,
  async fn() {
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    await withPage({}, async (page, url, { dialogs }) => {
      await page.setViewport(WIDE);
      await visit(page, `${url}/`);
      await send(page, `say: ${MARKDOWN}`);
      await page.waitForFunction(() => document.querySelectorAll(".run-end").length === 1);
      const answer = ".msg.assistant .text";
      assert.deepEqual(await texts(page, `${answer} h4`), ["Shopping"]);
      assert.deepEqual(await texts(page, `${answer} strong`), ["milk", "bold"]);
      assert.deepEqual(await texts(page, `${answer} em`), ["eggs"]);
      assert.deepEqual(await texts(page, `${answer} > ul > li`), ["one x * y", "twonested"]);
      assert.deepEqual(await texts(page, `${answer} ul ul > li`), ["nested"]);
      assert.deepEqual(await page.$$eval(`${answer} ol`, (n) => n.map((o) => o.getAttribute("start"))), [
        "3",
      ]);
      assert.deepEqual(await texts(page, `${answer} blockquote`), ["quoted bold"]);
      assert.deepEqual(await texts(page, `${answer} pre code`), ['const tag = "<b>";']);
      assert.deepEqual(await page.$$eval(`${answer} pre`, (n) => n.map((p) => p.dataset.lang)), ["js"]);
      assert.doesNotMatch((await texts(page, answer)).join(), /\*\*|^##/);
      assert.deepEqual(
        await page.$$eval(`${answer} a`, (n) => n.map((a) => [a.textContent, a.getAttribute("href")])),
        [["the shop", "https://shop.example/milk"], ["https://a.example", "https://a.example/"]],
      );
      await screenshots(page, "markdown");

      await send(page, `say: ${HOSTILE}`);
      await page.waitForFunction(() => document.querySelectorAll(".run-end").length === 2);
      const links = await page.$$eval(
        `${answer} a`,
        (n) => n.map((a) => [a.textContent, a.getAttribute("href")]),
      );
      assert.deepEqual(links.slice(2), [
        ["mail", "mailto:a@b.example"],
        ["a [nested [deep]]", "http://ok.example/x"],
        ["pic", "https://img.example/p.png"],
        ["inner", "https://outer.example/"],
      ]);
      const text = (await texts(page, answer)).at(-1)!;
      for (const shown of ["click", "upper", "spaced", "data", "rel", "<script>alert(5)</script>"]) {
        assert.ok(text.includes(shown), shown);
      }
      assert.ok(text.includes("<img src=x onerror=alert(6)>") && text.includes("<javascript:alert(8)>"));
      // Nothing but text and the markdown elements: no script, image, frame or handler attribute anywhere.
      const found = await page.$$eval(".messages *", (nodes) =>
        nodes.flatMap((n) => [
          ...(["SCRIPT", "IMG", "IFRAME", "OBJECT", "EMBED", "STYLE"].includes(n.tagName) ? [n.tagName] : []),
          ...n.getAttributeNames().filter((a) => /^on|^style$|^src$/i.test(a)),
          ...(n.getAttribute("href") !== null && !/^(https?:|mailto:)/.test(n.getAttribute("href")!)
            ? [`href ${n.getAttribute("href")}`]
            : []),
        ]));
      assert.deepEqual(found, []);

      // A huge answer of markup that never closes is shown as its text.
      const huge = "[".repeat(6000) + "*_`<".repeat(2500) + "<script>alert(9)</script>";
      await send(page, `say: ${huge}`);
      await page.waitForFunction(() => document.querySelectorAll(".run-end").length === 3);
      assert.equal((await texts(page, answer)).at(-1), huge);
      assert.deepEqual(dialogs, [], "no script ran");
      assert.equal(await page.$$eval(".messages script, .messages img", (n) => n.length), 0);

      // A long session: twelve exchanges of twenty lines each, opened afresh.
      const lines = Array.from({ length: 20 }, (_, i) => `- line ${i + 1} of this answer`).join("\n");
      for (let turn = 1; turn <= 12; turn++) await post(url, "long", `say: **Answer ${turn}**\n${lines}`);
      for (const size of [WIDE, PHONE]) {
        await page.setViewport(size);
        await visit(page, `${url}/#long`);
        await page.waitForFunction(() => document.querySelectorAll(".msg.assistant").length === 12);
        const where = await page.evaluate(() => {
          const list = document.querySelector("#messages")!;
          const answers = document.querySelectorAll(".msg.assistant");
          const last = answers[answers.length - 1].getBoundingClientRect();
          const first = answers[0].getBoundingClientRect();
          const view = list.scrollHeight > list.clientHeight ? list.getBoundingClientRect() : null;
          return {
            top: view?.top ?? 0,
            bottom: view?.bottom ?? innerHeight,
            last: { top: last.top, bottom: last.bottom },
            firstTop: first.top,
          };
        });
        assert.ok(
          where.last.bottom <= where.bottom + 1 && where.last.bottom > where.top,
          `the newest answer is in view at ${size.width} px: ${JSON.stringify(where)}`,
        );
        assert.ok(where.firstTop < where.top, `the first answer is scrolled away at ${size.width} px`);
        await page.screenshot({ path: `${ARTIFACTS}long_session_${size.width}.png` });
      }
    });
  },
});
