/// <reference lib="dom" />
/**
 * The web page's memory panel in a real headless Chromium against a real `deno task serve`: the session's
 * summary and the user's memory across sessions, each item with a delete button that erases it. Ignored, with
 * the reason printed, when no browser is installed.
 */
import assert from "node:assert/strict";
import { SqliteStore } from "../src/store/sqlite.ts";
import { tempDir } from "./_harness.ts";
import { ARTIFACTS, reason, texts, withPage } from "./_web_page.ts";

Deno.test({
  name: "the memory panel lists the user's memory with a delete button per item and a delete all",
  ignore: reason !== null,
  async fn() {
    await Deno.mkdir(ARTIFACTS, { recursive: true });
    using dir = tempDir();
    const path = `${dir.path}/sessions.db`;
    await withPage({ AGENT_DB_PATH: path }, async (page, url, { dialogs }) => {
      const store = new SqliteStore(path);
      try {
        await store.remember("local", { items: ["Prefers green tea", "Has a dog called Rex"], limit: 200 }, {
          sessionId: "w1",
        });
        await store.remember("other", { items: ["Not the page user's"], limit: 200 });
        await page.goto(`${url}/`, { waitUntil: "load" });
        await page.waitForSelector(".memory-item");
        assert.deepEqual(await texts(page, ".memory-item .memory-text"), [
          "Prefers green tea",
          "Has a dog called Rex",
        ]);
        assert.match((await texts(page, "#memory h3")).join("|"), /\[RUNTIME CONTEXT\]\|Todos\|Your memory/);
        const [tea] = await store.listMemory("local");
        await page.click(`.memory-item[data-id="${tea.id}"] button.forget`);
        await page.waitForFunction(() => document.querySelectorAll(".memory-item").length === 1);
        assert.deepEqual((await store.listMemory("local")).map((i) => i.text), ["Has a dog called Rex"]);
        await (await page.$("#memory-panel"))!.screenshot({ path: `${ARTIFACTS}memory.png` });
        await page.click("button.forget-all");
        await page.waitForFunction(() => document.querySelectorAll(".memory-item").length === 0);
        assert.match((await texts(page, ".user-memory")).join(), /Nothing yet/);
        assert.deepEqual(dialogs, ["confirm: Erase all of your memory? Sessions stay."]);
        assert.deepEqual(await store.listMemory("local"), []);
        assert.equal((await store.listMemory("other")).length, 1, "another user's memory stays");
      } finally {
        await store.close();
      }
    });
  },
});
