/**
 * How one setting's raw value is checked and turned into its value: the kinds, what each expects, the API
 * token pairs. Private to `config.ts`, which owns the settings themselves.
 * @module
 */
import {
  isValidId,
  LLM_APIS,
  type LlmApi,
  REASONING_EFFORTS,
  type ReasoningEffort,
  type TokenizerName,
  TOKENIZERS,
} from "./types.ts";
import { ConfigError } from "./errors.ts";
import { parseDatabaseUrl } from "./database_url.ts";
import { parsePrices, type PriceTable } from "./prices.ts";

/** `host[:port]` as a URL's hostname (lowercased) and port (`""` when none), or null when it is not one. */
export function authority(host: string): { hostname: string; port: string } | null {
  if (host === "" || /[\s/?#@\\]/.test(host)) return null;
  try {
    const { hostname, port } = new URL(`http://${host}`);
    // `new URL` drops :80 as http's default; keep it, so that a Host of `name:80` states its port.
    return { hostname, port: /:80$/.test(host) ? "80" : port };
  } catch {
    return null;
  }
}

/**
 * Reads `AGENT_ALLOWED_HOSTS`: comma-separated names, each `name` or `name:port`, lowercased.
 * @throws {TypeError} naming the entry that is not a host name with an optional port
 */
function parseAllowedHosts(raw: string): string[] {
  if (raw.trim() === "") return [];
  return raw.split(",").map((entry, index) => {
    const name = entry.trim().toLowerCase();
    const parsed = authority(name);
    if (parsed === null || parsed.hostname === "") {
      throw new TypeError(`entry ${index + 1} (${JSON.stringify(entry.trim())}) is not a host name[:port]`);
    }
    return parsed.port === "" ? parsed.hostname : `${parsed.hostname}:${parsed.port}`;
  });
}

/** Shortest API token accepted: shorter ones can be guessed. */
export const MIN_TOKEN_CHARS = 16;

/** What {@linkcode parseValue} needs of a setting: the field it sets, its kind, its least value. */
export interface ValueRule {
  /** The field of the config it sets (`apiKey` alone may be an empty string). */
  key: string;
  kind: Kind;
  /** The smallest value that can work, for numbers. */
  min?: number;
}

/** One `token:user_id` pair of AGENT_API_TOKENS. */
export interface ApiToken {
  token: string;
  userId: string;
}

/** The value a setting of each kind holds once read: the kinds {@linkcode parseValue} reads. */
export interface KindValue {
  string: string;
  url: string;
  positive: number;
  positiveOrUnset: number | null;
  positiveIntOrUnset: number | null;
  nonnegative: number;
  positiveInt: number;
  nonnegativeInt: number;
  flag: boolean;
  host: string;
  port: number;
  tokens: readonly ApiToken[];
  hosts: readonly string[];
  database: string;
  formatMode: "native" | "prompt";
  tokenizer: TokenizerName | "";
  effort: ReasoningEffort | null;
  api: LlmApi;
  prices: PriceTable;
}

/** How a variable's raw value is read: the rule {@linkcode parseValue} checks it against. */
export type Kind = keyof KindValue;

/** What a raw value of each kind must be, as the messages say. */
const EXPECTED: Record<Kind, string> = {
  string: "a string",
  url: "an http:// or https:// URL",
  positive: "a number greater than 0",
  positiveOrUnset: "a number greater than 0, or unset",
  positiveIntOrUnset: "a whole number of 1 or more, or unset",
  nonnegative: "a number of 0 or more",
  positiveInt: "a whole number of 1 or more",
  nonnegativeInt: "a whole number of 0 or more",
  flag: "1, 0, true, false or unset",
  host: "a host name or IP address",
  port: "a port number from 0 to 65535",
  tokens: "comma-separated token:user_id pairs (user ids of letters, digits and . _ : -)",
  hosts: "comma-separated host names, each with an optional :port",
  database: "postgres://user@host:port/database or unset",
  formatMode: "native or prompt",
  tokenizer: `${TOKENIZERS.join(" or ")}, or unset`,
  api: LLM_APIS.join(", "),
  effort: `${REASONING_EFFORTS.slice(0, -1).join(", ")} or ${REASONING_EFFORTS.at(-1)}, or unset`,
  prices:
    "comma-separated model=in/out, model=in/out/cached or model=in/out/cached/write, dollars per million tokens",
};

/** The pairs of AGENT_API_TOKENS. A message names a pair by its position and user, never by its token. */
function parseTokens(raw: string, fail: (detail?: string) => ConfigError): ApiToken[] {
  if (raw.trim() === "") return [];
  const tokens: ApiToken[] = [];
  for (const [index, pair] of raw.split(",").entries()) {
    const colon = pair.lastIndexOf(":");
    const token = pair.slice(0, colon).trim();
    const userId = pair.slice(colon + 1).trim();
    if (colon < 1 || token === "" || !isValidId(userId)) throw fail();
    const named = `pair ${index + 1} (user ${userId})`;
    if (token.length < MIN_TOKEN_CHARS) {
      throw fail(
        `the token of ${named} is ${token.length} characters, at least ${MIN_TOKEN_CHARS} are needed`,
      );
    }
    const first = tokens.findIndex((t) => t.token === token);
    if (first !== -1) {
      throw fail(
        `the token of ${named} is the same as that of pair ${first + 1} (user ${tokens[first].userId})`,
      );
    }
    tokens.push({ token, userId });
  }
  return Object.freeze(tokens) as ApiToken[];
}

/** The value of `raw` for `setting`; throws a `ConfigError` naming `name` (a secret's value hidden). */
export function parseValue(name: string, setting: ValueRule, raw: string): unknown {
  // A secret's value is never echoed: the message says only what is wrong with it.
  const shown = setting.kind === "tokens" || setting.kind === "database"
    ? "(value hidden)"
    : JSON.stringify(raw);
  const fail = (detail?: string) =>
    new ConfigError(name, `Invalid ${name}=${shown}: ${detail ?? `expected ${EXPECTED[setting.kind]}`}`);
  switch (setting.kind) {
    case "host":
      if (!/^[A-Za-z0-9.:\[\]-]+$/.test(raw)) throw fail();
      return raw;
    case "port":
      if (!/^\d{1,5}$/.test(raw.trim()) || Number(raw) > 65535) throw fail();
      return Number(raw);
    case "tokens":
      return parseTokens(raw, fail);
    case "hosts":
      try {
        return Object.freeze(parseAllowedHosts(raw));
      } catch (error) {
        throw fail((error as TypeError).message);
      }
    case "prices":
      try {
        return parsePrices(raw);
      } catch (error) {
        throw fail(`expected ${EXPECTED.prices}: ${(error as SyntaxError).message}`);
      }
    case "database":
      try {
        if (raw.trim() !== "") parseDatabaseUrl(raw.trim());
      } catch (error) {
        throw fail((error as TypeError).message);
      }
      return raw.trim();
    case "string":
      if (!/apiKey$/i.test(setting.key) && raw.trim() === "") throw fail();
      return raw;
    case "url": {
      let url: URL;
      try {
        url = new URL(raw);
      } catch {
        throw fail();
      }
      if (url.protocol !== "http:" && url.protocol !== "https:") throw fail();
      return raw.replace(/\/+$/, "");
    }
    case "formatMode": {
      const mode = raw.trim().toLowerCase();
      if (mode !== "native" && mode !== "prompt") throw fail();
      return mode;
    }
    case "tokenizer": {
      const name = raw.trim();
      if (name !== "" && !(TOKENIZERS as readonly string[]).includes(name)) throw fail();
      return name;
    }
    case "api": {
      const api = raw.trim().toLowerCase();
      if (!(LLM_APIS as readonly string[]).includes(api)) throw fail();
      return api;
    }
    case "effort": {
      const effort = raw.trim().toLowerCase();
      if (effort === "") return null;
      if (!(REASONING_EFFORTS as readonly string[]).includes(effort)) throw fail();
      return effort;
    }
    case "flag": {
      const flag = raw.trim().toLowerCase();
      if (flag !== "" && flag !== "0" && flag !== "1" && flag !== "true" && flag !== "false") throw fail();
      return flag === "1" || flag === "true";
    }
    default: {
      const unset = setting.kind === "positiveOrUnset" || setting.kind === "positiveIntOrUnset";
      if (unset && raw.trim() === "") return null;
      if (!/^\s*[+-]?(\d+\.?\d*|\.\d+)([eE][+-]?\d+)?\s*$/.test(raw)) throw fail();
      const value = Number(raw);
      const integer = setting.kind === "positiveInt" || setting.kind === "nonnegativeInt" ||
        setting.kind === "positiveIntOrUnset";
      const positive = setting.kind === "positive" || setting.kind === "positiveInt" || unset;
      if (!Number.isFinite(value) || (integer && !Number.isInteger(value))) throw fail();
      if (value < 0 || (positive && value === 0)) throw fail();
      if (setting.min !== undefined && value < setting.min) {
        throw fail(`expected at least ${setting.min}; smaller cannot work`);
      }
      return value;
    }
  }
}
