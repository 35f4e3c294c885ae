/**
 * The test-only npm packages, pinned in this one place. They are imported by full `npm:` specifier from
 * here, never through `deno.json`'s import map: `chat`, `serve` and `demo` must start with nothing from a
 * registry, and an import-map entry would make Deno install these for them too.
 * @module
 */
export { default as fc } from "npm:fast-check@4.11.0";
export { Ajv2020 } from "npm:ajv@8.20.0/dist/2020.js";
export { default as OpenAI } from "npm:openai@7.59.0";
export { default as puppeteer } from "npm:puppeteer-core@25.16.0";
export type { Browser, Page } from "npm:puppeteer-core@25.16.0";
