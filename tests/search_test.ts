import assert from "node:assert/strict";
import {
  createSearchIndex,
  createSearchTool,
  loadCorpus,
  search,
  type SearchDoc,
  SNIPPET_CHARS,
} from "../src/tools/search.ts";

const DOCS_DIR = new URL("../data/docs", import.meta.url).pathname;
const corpus = loadCorpus(DOCS_DIR);

function ids(hits: { id: string }[]): string[] {
  return hits.map((hit) => hit.id);
}

Deno.test("loadCorpus() reads the shipped docs sorted by id, each with a title, a body and a Chinese summary", () => {
  assert.ok(corpus.length >= 8 && corpus.length <= 12, `expected 8-12 docs, got ${corpus.length}`);
  const sorted = [...ids(corpus)].sort();
  assert.deepEqual(ids(corpus), sorted);
  for (const doc of corpus) {
    assert.match(doc.id, /^[a-z_]+$/);
    assert.ok(doc.title.length > 0 && !doc.title.startsWith("#"), doc.id);
    assert.ok(!doc.body.startsWith("# "), `${doc.id}: the title line must not be part of the body`);
    assert.match(doc.body, /摘要：\S/, `${doc.id} ends with a Chinese summary`);
    const lines = doc.body.split("\n").length + 2;
    assert.ok(lines >= 15 && lines <= 40, `${doc.id} has ${lines} lines`);
  }
});

Deno.test("loadCorpus() throws an Error naming a missing dir", () => {
  const dir = new URL("../data/no_such_dir", import.meta.url).pathname;
  assert.throws(() => loadCorpus(dir), (error: unknown) => {
    assert.ok(error instanceof Error);
    assert.ok(error.message.startsWith(`Cannot load search corpus from "${dir}": `), error.message);
    return true;
  });
});

Deno.test("loadCorpus() throws an Error naming a dir that holds no .md files", () => {
  const dir = new URL("../src/tools", import.meta.url).pathname;
  assert.throws(
    () => loadCorpus(dir),
    new Error(`Cannot load search corpus from "${dir}": it has no .md files`),
  );
});

Deno.test("search() ranks the matching doc first for an English query", () => {
  assert.equal(search(corpus, "compaction summary")[0].id, "compaction");
  assert.equal(search(corpus, "SQLite WAL transaction")[0].id, "sessions");
  assert.equal(search(corpus, "Chat Completions fetch timeout")[0].id, "llm_client");
  assert.equal(search(corpus, "ConfigError SessionError")[0].id, "errors");
  assert.equal(search(corpus, "JSONL trace events")[0].id, "trace");
  assert.equal(search(corpus, "REPL commands")[0].id, "repl");
  assert.equal(search(corpus, "least privilege")[0].id, "permissions");
  assert.equal(search(corpus, "environment variables")[0].id, "configuration");
  assert.equal(search(corpus, "empty reply nudge")[0].id, "loop");
});

Deno.test("search() is case-insensitive, including full-width letters", () => {
  const lower = search(corpus, "sqlite wal");
  assert.deepEqual(search(corpus, "SQLITE WAL"), lower);
  assert.deepEqual(search(corpus, "ＳＱＬｉｔｅ ＷＡＬ"), lower);
});

Deno.test("search() finds docs for Chinese queries through character bigrams", () => {
  assert.equal(search(corpus, "压缩")[0].id, "compaction");
  assert.equal(search(corpus, "会话")[0].id, "sessions");
  assert.equal(search(corpus, "环境变量")[0].id, "configuration");
  assert.equal(search(corpus, "上下文压缩是什么？")[0].id, "compaction");
});

Deno.test("search() returns id, title, a snippet around the first match and a 4-decimal score", () => {
  const [hit] = search(corpus, "压缩");
  assert.deepEqual(Object.keys(hit), ["id", "title", "snippet", "score"]);
  assert.equal(hit.title, corpus.find((doc) => doc.id === "compaction")!.title);
  assert.ok(hit.snippet.includes("压缩"), hit.snippet);
  assert.ok(hit.snippet.startsWith("…"));
  assert.ok(hit.snippet.length <= SNIPPET_CHARS + 45, `snippet is ${hit.snippet.length} chars`);
  assert.doesNotMatch(hit.snippet, /\s{2}|\n/);
  assert.ok(hit.score > 0);
  assert.equal(hit.score, Math.round(hit.score * 1e4) / 1e4);
});

Deno.test("search() returns the whole body, whitespace collapsed, as the snippet of a short doc", () => {
  const docs: SearchDoc[] = [{ id: "short", title: "Short", body: "A tiny\n\n  body about   tools." }];
  assert.deepEqual(search(docs, "tools"), [
    {
      id: "short",
      title: "Short",
      snippet: "A tiny body about tools.",
      score: search(docs, "tools")[0].score,
    },
  ]);
});

Deno.test("search() cuts a long snippet at both ends with an ellipsis", () => {
  const filler = "lorem ipsum dolor sit amet ".repeat(20);
  const docs: SearchDoc[] = [{ id: "long", title: "Long", body: `${filler}needle here ${filler}` }];
  const [hit] = search(docs, "needle");
  assert.ok(hit.snippet.startsWith("…") && hit.snippet.endsWith("…"), hit.snippet);
  assert.ok(hit.snippet.includes("needle here"));
  assert.ok(hit.snippet.length <= SNIPPET_CHARS + 45);
});

Deno.test("search() weights a title match above a body match", () => {
  const docs: SearchDoc[] = [
    { id: "a_body", title: "Other", body: "This one mentions widgets once among other words here." },
    { id: "b_title", title: "Widgets", body: "This one is about something else among other words here." },
  ];
  assert.deepEqual(ids(search(docs, "widgets")), ["b_title", "a_body"]);
});

Deno.test("search() breaks score ties by id ascending, whatever the corpus order", () => {
  const docs: SearchDoc[] = [
    { id: "gamma", title: "Same", body: "apple pie" },
    { id: "alpha", title: "Same", body: "apple pie" },
    { id: "beta", title: "Same", body: "apple pie" },
    { id: "delta", title: "Other", body: "banana split" },
  ];
  const hits = search(docs, "apple");
  assert.deepEqual(ids(hits), ["alpha", "beta", "gamma"]);
  assert.equal(new Set(hits.map((hit) => hit.score)).size, 1);
  assert.deepEqual(ids(search([...docs].reverse(), "apple")), ["alpha", "beta", "gamma"]);
});

Deno.test("search() returns at most 3 hits by default and honours a limit", () => {
  const common = "the runtime";
  assert.ok(search(corpus, common, { limit: 10 }).length > 3);
  assert.equal(search(corpus, common).length, 3);
  assert.equal(search(corpus, common, { limit: 1 }).length, 1);
  assert.throws(() => search(corpus, common, { limit: 0 }), RangeError);
});

Deno.test("search() returns [] when no doc matches", () => {
  assert.deepEqual(search(corpus, "xylophone zebra"), []);
  assert.deepEqual(search(corpus, "火星"), []);
});

Deno.test("search() rejects a query with no words", () => {
  for (const query of ["", "   ", "?!", "— …"]) {
    assert.throws(() => search(corpus, query), new Error("Cannot search: query has no words"), query);
  }
});

Deno.test("search() is deterministic: the same query gives the same result", () => {
  const index = createSearchIndex(corpus);
  for (const query of ["tool results truncated", "会话 压缩", "retries"]) {
    const first = index.search(query);
    assert.deepEqual(index.search(query), first);
    assert.deepEqual(search(loadCorpus(DOCS_DIR), query), first);
  }
});

Deno.test("createSearchIndex() rejects duplicate ids, which would make ties ambiguous", () => {
  const doc: SearchDoc = { id: "same", title: "T", body: "b" };
  assert.throws(() => createSearchIndex([doc, doc]), TypeError);
});

Deno.test("createSearchTool() declares search_mock with a required non-empty query", () => {
  const tool = createSearchTool(corpus);
  assert.equal(tool.name, "search_mock");
  assert.deepEqual(tool.parameters, {
    type: "object",
    properties: {
      query: { type: "string", minLength: 1, description: "Keywords, e.g. compaction summary" },
    },
    required: ["query"],
    additionalProperties: false,
  });
});

Deno.test("createSearchTool() handler returns {query, results} with the top 3 hits", async () => {
  const tool = createSearchTool(corpus);
  const output = await tool.handler({ query: "compaction" }, { sessionId: "s1", userId: "u1" });
  assert.deepEqual(output, { query: "compaction", results: search(corpus, "compaction") });
  const { results } = output as { results: unknown[] };
  assert.ok(results.length >= 1 && results.length <= 3);
});

Deno.test("createSearchTool() handler throws for a query with no words", () => {
  const tool = createSearchTool(corpus);
  assert.throws(
    () => tool.handler({ query: "!!!" }, { sessionId: "s1", userId: "u1" }),
    new Error("Cannot search: query has no words"),
  );
});
