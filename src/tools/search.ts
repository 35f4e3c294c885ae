/**
 * The `search_mock` tool: deterministic keyword search over the Markdown documents in `data/docs/`. Text is
 * NFKC-normalized and lowercased; letter and digit runs become words, CJK runs character bigrams (so `压缩`
 * matches without a segmenter). BM25 scores, title terms counted {@linkcode TITLE_WEIGHT} times, are rounded
 * to 4 decimals so ties are real and broken by id; nothing depends on file order, locale or clock.
 * @module
 */
import { join } from "node:path";
import type { ToolSpec } from "./registry.ts";

/** One document of the corpus: its file name without `.md` (unique), its `# Title` text, the rest trimmed. */
export interface SearchDoc {
  id: string;
  title: string;
  body: string;
}

/** One ranked result: its document's id and title, a snippet of {@linkcode SNIPPET_CHARS}, a score > 0. */
export type SearchHit = Pick<SearchDoc, "id" | "title"> & { snippet: string; score: number };

/** Options of {@linkcode search} and {@linkcode SearchIndex.search}. */
export interface SearchOptions {
  /** Most hits returned; a positive integer. @default {3} */
  limit?: number;
}

/** A corpus tokenized once, ready for any number of queries. */
export interface SearchIndex {
  /** Ranks the documents for `query`; same contract as {@linkcode search}. */
  search(query: string, options?: SearchOptions): SearchHit[];
}

/** How many times a title occurrence counts: a word in the title says more than one in passing. */
export const TITLE_WEIGHT = 3;
/** Target snippet length in characters. */
export const SNIPPET_CHARS = 160;

// Standard BM25 constants: term-frequency saturation and length normalization.
const K1 = 1.2;
const B = 0.75;

const CJK = String.raw`\p{scx=Han}\p{scx=Hiragana}\p{scx=Katakana}\p{scx=Hangul}`;
// The CJK class is intersected with letters/digits because script extensions also cover punctuation (、。).
const SEGMENT = new RegExp(
  String.raw`(?<cjk>[[\p{L}\p{N}]&&[${CJK}]]+)|(?<word>[[\p{L}\p{N}_]--[${CJK}]]+)`,
  "gv",
);

interface Occurrence {
  term: string;
  position: number;
}

interface IndexedDoc {
  doc: SearchDoc;
  /** The body with whitespace collapsed: what snippets are cut from. */
  text: string;
  /** Term frequency with title occurrences weighted. */
  frequencies: Map<string, number>;
  length: number;
  /** Where each term first occurs in `text`. */
  firstPosition: Map<string, number>;
}

/** Splits text into terms, each segment normalized once found, so positions point into `text` as written. */
function tokenize(text: string): Occurrence[] {
  const occurrences: Occurrence[] = [];
  for (const match of text.matchAll(SEGMENT)) {
    const position = match.index;
    const segment = match[0].normalize("NFKC").toLowerCase();
    if (match.groups?.word !== undefined) {
      occurrences.push({ term: segment, position });
      continue;
    }
    const chars = [...segment];
    if (chars.length === 1) {
      occurrences.push({ term: chars[0], position });
      continue;
    }
    // Offsets count in the normalized segment: NFKC rarely changes CJK lengths; snippets need only be near.
    let offset = 0;
    const end = position + match[0].length;
    for (let i = 0; i + 1 < chars.length; i++) {
      occurrences.push({ term: chars[i] + chars[i + 1], position: Math.min(position + offset, end - 1) });
      offset += chars[i].length;
    }
  }
  return occurrences;
}

/** Collapses whitespace; the text itself is kept as written for snippets. */
function collapse(text: string): string {
  return text.replace(/\s+/g, " ").trim();
}

function indexDoc(doc: SearchDoc): IndexedDoc {
  const text = collapse(doc.body);
  const frequencies = new Map<string, number>();
  const firstPosition = new Map<string, number>();
  const titleTerms = tokenize(collapse(doc.title));
  const bodyTerms = tokenize(text);
  for (const { term } of titleTerms) frequencies.set(term, (frequencies.get(term) ?? 0) + TITLE_WEIGHT);
  for (const { term, position } of bodyTerms) {
    frequencies.set(term, (frequencies.get(term) ?? 0) + 1);
    if (!firstPosition.has(term)) firstPosition.set(term, position);
  }
  const length = bodyTerms.length + TITLE_WEIGHT * titleTerms.length;
  return { doc, text, frequencies, length, firstPosition };
}

/** Moves `index` off the second half of a surrogate pair so a cut never splits a character. */
function codePointBoundary(text: string, index: number): number {
  const code = text.charCodeAt(index);
  return code >= 0xdc00 && code <= 0xdfff ? index + 1 : index;
}

/** Cuts about SNIPPET_CHARS around `position`, at spaces when there is one close by (CJK text has none). */
function snippet(text: string, position: number): string {
  if (text.length <= SNIPPET_CHARS) return text;
  let start = Math.max(0, Math.min(position - 40, text.length - SNIPPET_CHARS));
  let end = Math.min(text.length, start + SNIPPET_CHARS);
  if (start > 0) {
    const space = text.lastIndexOf(" ", start);
    if (space >= 0 && start - space <= 20) start = space + 1;
  }
  if (end < text.length) {
    const space = text.indexOf(" ", end);
    if (space >= 0 && space - end <= 20) end = space;
  }
  start = codePointBoundary(text, start);
  end = codePointBoundary(text, end);
  const cut = text.slice(start, end).trim();
  return `${start > 0 ? "…" : ""}${cut}${end < text.length ? "…" : ""}`;
}

/**
 * Tokenizes `corpus` once (later changes to it do not reach the index) into an index to query repeatedly.
 * Throws `TypeError` when two documents share an id, since ties are broken by id.
 */
export function createSearchIndex(corpus: readonly SearchDoc[]): SearchIndex {
  const seen = new Set<string>();
  for (const { id } of corpus) {
    if (seen.has(id)) throw new TypeError(`Cannot index search corpus: duplicate document id "${id}"`);
    seen.add(id);
  }
  const docs = corpus.map(indexDoc);
  const documentFrequency = new Map<string, number>();
  for (const { frequencies } of docs) {
    for (const term of frequencies.keys()) {
      documentFrequency.set(term, (documentFrequency.get(term) ?? 0) + 1);
    }
  }
  const averageLength = docs.length === 0 ? 0 : docs.reduce((sum, d) => sum + d.length, 0) / docs.length;

  function rank(query: string, options: SearchOptions = {}): SearchHit[] {
    const { limit = 3 } = options;
    if (typeof query !== "string") {
      throw new TypeError(`Cannot search: query must be a string, got ${typeof query}`);
    }
    if (!Number.isInteger(limit) || limit < 1) {
      throw new RangeError(`Cannot search: limit must be a positive integer, got ${limit}`);
    }
    // Unique terms in order of first appearance: a fixed summation order keeps scores bit-for-bit stable.
    const terms = [...new Set(tokenize(query).map((o) => o.term))];
    if (terms.length === 0) throw new Error("Cannot search: query has no words");

    const hits: SearchHit[] = [];
    for (const indexed of docs) {
      let score = 0;
      let position = Infinity;
      for (const term of terms) {
        const frequency = indexed.frequencies.get(term);
        if (frequency === undefined) continue;
        const df = documentFrequency.get(term)!;
        const idf = Math.log(1 + (docs.length - df + 0.5) / (df + 0.5));
        const norm = K1 * (1 - B + (B * indexed.length) / averageLength);
        score += (idf * frequency * (K1 + 1)) / (frequency + norm);
        position = Math.min(position, indexed.firstPosition.get(term) ?? Infinity);
      }
      score = Math.round(score * 1e4) / 1e4;
      if (score <= 0) continue;
      const { id, title } = indexed.doc;
      // A title-only match has no body position: show the start of the body.
      hits.push({ id, title, snippet: snippet(indexed.text, position === Infinity ? 0 : position), score });
    }
    // Code-unit comparison, not localeCompare: the order must not depend on the host's locale.
    hits.sort((a, b) => b.score - a.score || (a.id < b.id ? -1 : a.id > b.id ? 1 : 0));
    return hits.slice(0, limit);
  }

  return { search: rank };
}

/**
 * Ranks `corpus` for `query`, case-insensitive: at most `limit` hits with score > 0, best first, ties by id;
 * `[]` when nothing matches. Throws `Error` when the query has no words, `RangeError` for a bad `limit`.
 * Tokenizes the corpus on every call: use {@linkcode createSearchIndex} to query it repeatedly.
 */
export function search(corpus: readonly SearchDoc[], query: string, options?: SearchOptions): SearchHit[] {
  return createSearchIndex(corpus).search(query, options);
}

/**
 * Reads every `.md` file directly in `dir`, by file name: a `# Title` line, then the body. Throws an `Error`
 * naming `dir` when it is unreadable, holds no `.md` file, or a file without a title line.
 */
export function loadCorpus(dir: string): SearchDoc[] {
  let names: string[];
  try {
    names = [...Deno.readDirSync(dir)]
      .filter((entry) => entry.isFile && entry.name.endsWith(".md"))
      .map((entry) => entry.name);
  } catch (error) {
    throw new Error(`Cannot load search corpus from "${dir}": ${(error as Error).message}`, { cause: error });
  }
  if (names.length === 0) throw new Error(`Cannot load search corpus from "${dir}": it has no .md files`);
  names.sort((a, b) => (a < b ? -1 : a > b ? 1 : 0));
  return names.map((name) => {
    const text = Deno.readTextFileSync(join(dir, name)).replace(/^\uFEFF/, "");
    const newline = text.indexOf("\n");
    const first = (newline < 0 ? text : text.slice(0, newline)).trim();
    if (!/^# \S/.test(first)) {
      throw new Error(
        `Cannot load search corpus from "${dir}": "${name}" does not start with a "# Title" line`,
      );
    }
    return {
      id: name.slice(0, -".md".length),
      title: first.slice(2).trim(),
      body: newline < 0 ? "" : text.slice(newline + 1).trim(),
    };
  });
}

/** The `search_mock` tool over `corpus`, indexed once; its handler returns `{query, results}` (≤ 3 hits). */
export function createSearchTool(corpus: readonly SearchDoc[]): ToolSpec {
  const index = createSearchIndex(corpus);
  return {
    name: "search_mock",
    safeToRepeat: true,
    description: "Search the runtime's own documentation (the agent loop, tools, sessions, compaction, " +
      "tracing, configuration, the LLM client, permissions, the REPL, errors). Keyword search, English or " +
      "Chinese; returns up to 3 documents with a title, a snippet and a score.",
    parameters: {
      type: "object",
      properties: {
        query: { type: "string", minLength: 1, description: "Keywords, e.g. compaction summary" },
      },
      required: ["query"],
      additionalProperties: false,
    },
    handler(args) {
      const query = args.query as string;
      return { query, results: index.search(query) };
    },
  };
}
