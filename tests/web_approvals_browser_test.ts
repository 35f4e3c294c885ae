/// <reference lib="dom" />
/**
 * Approvals in the web page, in a real headless Chromium against a real `serve` whose policy makes `todo`
 * ask, and the fake provider (`add todo: A; B` calls `todo` once per item): the waiting calls with their
 * arguments, a message refused meanwhile, Approve, Approve all, and Deny. Ignored, with the reason printed,
 * when no browser is installed.
 */
import assert from "node:assert/strict";
import type { Page } from "./_dev_deps.ts";
import { ARTIFACTS, reason, texts, withPage } from "./_web_page.ts";

const POLICY = { default: "auto", tools: { todo: "ask" } };

/** The waiting calls the page shows: tool name, arguments as shown, and decision so far. */
function shownCalls(page: Page): Promise<{ name: string; args: string; decision: string }[]> {
  return page.$$eval("#approvals .approval-call", (rows) =>
    rows.map((row) => ({
      name: row.querySelector(".tool-name")?.textContent ?? "",
      args: row.querySelector(".tool-args")?.textContent ?? "",
      decision: (row as HTMLElement).dataset.decision ?? "",
    })));
}

/** Waits until an assistant bubble reads exactly `text`. */
function answerShown(page: Page, text: string): Promise<unknown> {
  return page.waitForFunction(
    (expected) =>
      [...document.querySelectorAll(".msg.assistant .text")].some((n) => n.textContent === expected),
    {},
    text,
  );
}

/** Waits until the memory panel's todos table lists exactly `expected`. */
function todosShown(page: Page, expected: string[]): Promise<unknown> {
  return page.waitForFunction(
    (want) =>
      JSON.stringify([...document.querySelectorAll("#memory table.todos tbody tr td:nth-child(2)")]
        .map((td) => td.textContent)) === JSON.stringify(want),
    {},
    expected,
  );
}

/** The tool messages of the provider's last request. */
function lastToolMessages(requests: Record<string, unknown>[]): string[] {
  const messages = requests.at(-1)!.messages as { role: string; content: string }[];
  return messages.filter((m) => m.role === "tool").map((m) => m.content);
}

Deno.test({
  name: "the page shows a call waiting for approval, refuses a message meanwhile, and runs it once approved",
  ignore: reason !== null,
  async fn() {
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    await withPage({}, async (page, url, { serve, provider }) => {
      await page.goto(`${url}/`, { waitUntil: "load" });
      await page.waitForSelector("#input");
      assert.equal(await page.$eval("#approvals", (n) => (n as HTMLElement).hidden), true);
      await page.type("#input", "add todo: buy milk");
      await page.keyboard.press("Enter");
      await page.waitForSelector("#approvals:not([hidden]) .approval-call");
      const [call] = await shownCalls(page);
      assert.equal(call.name, "todo");
      assert.deepEqual(JSON.parse(call.args), { action: "add", text: "buy milk" });
      assert.match((await texts(page, ".run-end")).join(), /awaiting_approval · 1 step\(s\)/);
      assert.match((await texts(page, ".marker.approval")).join(), /waiting for your approval: todo/);
      assert.match((await texts(page, "#composer-note")).join(), /waits for your approval/);
      assert.equal(await page.$("#approvals .approve-all"), null, "one call: no Approve all");
      assert.match((await texts(page, "#memory")).join(), /No todos\./);
      await page.screenshot({ path: `${ARTIFACTS}approval.png` });

      // A message while the call waits: the server refuses it, and the page shows why.
      await page.type("#input", "hello");
      await page.keyboard.press("Enter");
      await page.waitForSelector(".msg.error .cause");
      assert.match(
        (await texts(page, ".msg.error .cause")).join(),
        /^approval_pending: Cannot start a turn: session "web-[^"]+" has a turn waiting for approval/,
      );
      assert.equal(provider.requests.length, 1, "the refused message never reached the model");

      await page.click("#approvals .approval-call button.approve");
      await answerShown(page, "Added todo #1: buy milk.");
      await todosShown(page, ["buy milk"]);
      await page.waitForFunction(() => document.querySelector<HTMLElement>("#approvals")!.hidden);
      assert.equal(await page.$eval("#composer-note", (n) => (n as HTMLElement).hidden), true);
      assert.match((await texts(page, ".marker.approval")).join("|"), /\|todo approved$/);
      const status = await page.$eval(
        'details.tool[data-tool="todo"]',
        (n) => (n as HTMLElement).dataset.status,
      );
      assert.equal(status, "ok");
      assert.match((await texts(page, ".run-end")).join("|"), /\|answered · 2 step\(s\) timeline$/);

      // Two calls in one reply: Approve all sends a decision for each, in one request.
      await page.type("#input", "add todo: eggs; bread");
      await page.keyboard.press("Enter");
      await page.waitForFunction(() => document.querySelectorAll("#approvals .approval-call").length === 2);
      await page.click("#approvals .approve-all");
      await answerShown(page, "Added todo #3: bread.");
      await todosShown(page, ["buy milk", "eggs", "bread"]);
      assert.equal(lastToolMessages(provider.requests).length, 3);
      assert.doesNotMatch(serve.stderr(), /error/i);
    }, { policy: POLICY });
  },
});

Deno.test({
  name: "the page sends denials once every waiting call is decided, and the model hears the refusal",
  ignore: reason !== null,
  async fn() {
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    await withPage({}, async (page, url, { provider, dialogs }) => {
      // The bodies of the decisions the page sends, in order.
      const sent: string[] = [];
      page.on("request", (request) => {
        if (request.method() === "POST" && request.url().endsWith("/approvals")) {
          sent.push(request.postData() ?? "");
        }
      });
      await page.goto(`${url}/`, { waitUntil: "load" });
      await page.waitForSelector("#input");
      const payload = "<img src=x onerror=alert(1)>";
      await page.type("#input", `add todo: ${payload}; call mom`);
      await page.keyboard.press("Enter");
      await page.waitForFunction(() => document.querySelectorAll("#approvals .approval-call").length === 2);
      const calls = await shownCalls(page);
      assert.deepEqual(calls.map((c) => JSON.parse(c.args).text), [payload, "call mom"]);
      assert.equal(await page.$$eval("#approvals img", (nodes) => nodes.length), 0, "arguments are text");

      // One call decided: nothing is sent yet (the server wants a decision on every waiting call).
      // The click's handler marks the call and would send in the same task: once the mark shows, it is done.
      await page.click("#approvals .approval-call:first-child button.deny");
      await page.waitForFunction(() =>
        document.querySelector<HTMLElement>("#approvals .approval-call:first-child")?.dataset.decision ===
          "deny"
      );
      assert.deepEqual((await shownCalls(page)).map((c) => c.decision), ["deny", ""]);
      assert.equal(await page.$eval("#approvals", (n) => n.classList.contains("sending")), false);
      assert.equal(provider.requests.length, 1);

      await page.click("#approvals .approval-call:last-child button.deny");
      await answerShown(page, "The tool failed: denied by the user");
      // One request, sent after the last decision, carries both: none went out after the first alone.
      assert.equal(sent.length, 1, JSON.stringify(sent));
      assert.deepEqual(Object.values(JSON.parse(sent[0]).decisions), ["deny", "deny"]);
      await page.waitForFunction(() => document.querySelector<HTMLElement>("#approvals")!.hidden);
      assert.deepEqual(
        lastToolMessages(provider.requests).map((content) => {
          const { ok, error } = JSON.parse(content);
          return { ok, error };
        }),
        [{ ok: false, error: "denied by the user" }, { ok: false, error: "denied by the user" }],
      );
      assert.match((await texts(page, "#memory")).join(), /No todos\./);
      await page.screenshot({ path: `${ARTIFACTS}approval_denied.png` });

      await page.reload({ waitUntil: "load" });
      await page.waitForFunction(() =>
        document.querySelectorAll('details.tool[data-tool="todo"]').length === 2
      );
      const boxes = await page.$$eval(
        'details.tool[data-tool="todo"]',
        (nodes) =>
          nodes.map((n) => [(n as HTMLElement).dataset.status, n.querySelector(".tool-result")?.textContent]),
      );
      assert.deepEqual(boxes, [["error", '"denied by the user"'], ["error", '"denied by the user"']]);
      assert.equal(await page.$eval("#approvals", (n) => (n as HTMLElement).hidden), true);
      assert.equal(await page.$$eval("img", (nodes) => nodes.length), 0);
      assert.deepEqual(dialogs, [], "no script ran");
    }, { policy: POLICY });
  },
});
