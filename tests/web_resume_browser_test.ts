/// <reference lib="dom" />
/**
 * A dropped stream and Stop in the web page, in a real headless Chromium against a real `serve` reached
 * through a loopback TCP proxy the test can cut: the page loses its connection mid-answer, follows the run
 * again from the events route and shows the whole answer once; Stop cancels the running turn on the server.
 * Ignored, with the reason printed, when no browser is installed.
 */
import assert from "node:assert/strict";
import { ARTIFACTS, reason, texts, withPage } from "./_web_page.ts";
import { until } from "./_http_harness.ts";

/** A loopback TCP proxy to a port set later, whose open connections the test can cut at once. */
class CuttableProxy {
  readonly port: number;
  target = 0;
  /** Connections cut so far. */
  cut = 0;
  #listener: Deno.Listener;
  #open = new Set<Deno.Conn>();
  #pipes = new Set<Promise<unknown>>();
  #accepting: Promise<void>;

  constructor() {
    this.#listener = Deno.listen({ hostname: "127.0.0.1", port: 0 });
    this.port = (this.#listener.addr as Deno.NetAddr).port;
    this.#accepting = this.#accept();
  }

  async #accept(): Promise<void> {
    try {
      for await (const client of this.#listener) {
        const upstream = await Deno.connect({ hostname: "127.0.0.1", port: this.target }).catch(() => null);
        if (upstream === null) {
          client.close();
          continue;
        }
        this.#open.add(client).add(upstream);
        const pipe = (from: Deno.Conn, to: Deno.Conn) =>
          from.readable.pipeTo(to.writable).catch(() => {}).finally(() => this.#close(from, to));
        for (const piped of [pipe(client, upstream), pipe(upstream, client)]) {
          this.#pipes.add(piped);
          piped.finally(() => this.#pipes.delete(piped));
        }
      }
    } catch {
      // The listener closed.
    }
  }

  #close(...conns: Deno.Conn[]): void {
    for (const conn of conns) {
      if (!this.#open.delete(conn)) continue;
      try {
        conn.close();
      } catch {
        // Closed by its pipe already.
      }
    }
  }

  /** Cuts every open connection, as a network drop would. */
  cutAll(): void {
    this.cut += this.#open.size / 2;
    this.#close(...this.#open);
  }

  async close(): Promise<void> {
    this.#listener.close();
    await this.#accepting;
    this.cutAll();
    await Promise.all([...this.#pipes]);
  }
}

/** Waits until an assistant bubble reads exactly `text`. */
function answerShown(page: import("./_dev_deps.ts").Page, text: string): Promise<unknown> {
  return page.waitForFunction(
    (expected) =>
      [...document.querySelectorAll(".msg.assistant .text")].some((n) => n.textContent === expected),
    {},
    text,
  );
}

Deno.test({
  name:
    "the page that loses its connection mid-answer follows the run again and shows the whole answer once; Stop cancels",
  ignore: reason !== null,
  async fn() {
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    const proxy = new CuttableProxy();
    try {
      const env = { AGENT_ALLOWED_HOSTS: `127.0.0.1:${proxy.port}` };
      await withPage(env, async (page, url, { serve, provider }) => {
        proxy.target = Number(new URL(url).port);
        const front = `http://127.0.0.1:${proxy.port}`;
        let release!: () => void;
        provider.hold = new Promise<void>((resolve) => (release = resolve));
        await page.goto(`${front}/`, { waitUntil: "load" });
        await page.waitForSelector("#input");
        await page.type("#input", "say: alpha beta gamma delta");
        await page.keyboard.press("Enter");
        // The first word streamed in; the rest waits at the provider. Then the network drops.
        await page.waitForFunction(() =>
          document.querySelector(".msg.assistant.streaming .text")?.textContent === "alpha "
        );
        assert.equal(await page.$eval("#stop", (n) => (n as HTMLElement).hidden), false, "Stop shows");
        proxy.cutAll();
        assert.ok(proxy.cut >= 1, "the stream's connection was cut");
        await until(
          () => /GET \/v1\/sessions\/\S+\/runs\/\S+\/events 200/.test(serve.stderr()),
          "a reconnect",
        );
        release();
        await answerShown(page, "alpha beta gamma delta");
        await page.waitForSelector(".run-end");
        assert.deepEqual(await texts(page, ".msg.assistant .text"), ["alpha beta gamma delta"], "shown once");
        assert.equal(await page.$(".msg.assistant.streaming"), null, "the streamed part was replaced");
        assert.deepEqual(await texts(page, ".msg.user"), ["say: alpha beta gamma delta"]);
        assert.match((await texts(page, ".run-end")).join(), /^answered · 1 step\(s\)/);
        assert.deepEqual(await texts(page, ".msg.error"), []);
        await page.waitForFunction(() => (document.querySelector("#stop") as HTMLElement).hidden);
        assert.equal(await page.$(".progress"), null, "the running-step line went with the run");
        await page.screenshot({ path: `${ARTIFACTS}resumed.png` });

        // Stop: the turn is cancelled on the server and taken back.
        provider.hold = new Promise<void>((resolve) => (release = resolve));
        await page.type("#input", "say: never finished");
        await page.keyboard.press("Enter");
        await page.waitForFunction(() =>
          document.querySelector(".msg.assistant.streaming .text")?.textContent === "never "
        );
        await page.click("#stop");
        await page.waitForFunction(() => document.querySelectorAll(".run-end").length === 2);
        assert.match((await texts(page, ".run-end")).at(-1)!, /^aborted/);
        // The Stop the user asked for is said once, as such: no error box, no Retry.
        await page.waitForSelector(".marker.stopped");
        assert.deepEqual(await texts(page, ".marker.stopped"), ["stopped"]);
        assert.deepEqual(await texts(page, ".msg.error"), []);
        assert.equal(await page.$("button.retry"), null);
        release();
        const session = await (await fetch(`${front}/v1/sessions/${page.url().split("#")[1]}`)).json();
        assert.deepEqual(
          session.messages.map((m: { content: string }) => m.content),
          ["say: alpha beta gamma delta", "alpha beta gamma delta"],
          "the cancelled turn was taken back",
        );
        assert.match(serve.stderr(), /POST \/v1\/sessions\/\S+\/cancel 202/);
        await page.screenshot({ path: `${ARTIFACTS}stopped.png` });
      }, { expectedConsole: /net::ERR_INCOMPLETE_CHUNKED_ENCODING/ });
    } finally {
      await proxy.close();
    }
  },
});
