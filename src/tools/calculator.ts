/**
 * The `calculator` tool: arithmetic parsed by hand (recursive descent, one token of lookahead), so no model
 * output reaches `eval`. The grammar has Python's precedence, so the model's intuition carries over:
 * ```
 * expr    := term (("+" | "-") term)*
 * term    := factor (("*" | "/" | "%") factor)*
 * factor  := ("+" | "-") factor | power
 * power   := primary ("**" factor)?
 * primary := NUMBER | "(" expr ")"
 * ```
 * @module
 */
import type { ToolSpec } from "./registry.ts";
import { shorten } from "../shorten.ts";

/** Longest expression accepted, in UTF-16 code units; checked before any parsing. */
export const MAX_EXPRESSION_LENGTH = 500;
/** Deepest nesting of parentheses and unary signs, counted together. */
export const MAX_NESTING_DEPTH = 100;

/** An expression could not be evaluated: bad syntax, an unsupported name, or an arithmetic failure. */
export class CalculatorError extends Error {
  override name = "CalculatorError";

  /** `position`: the 0-based index of the problem; `null` when it concerns the whole input. */
  constructor(message: string, readonly position: number | null) {
    super(message);
  }
}

type TokenKind = "number" | "operator" | "(" | ")" | "end";

interface Token {
  kind: TokenKind;
  text: string;
  position: number;
  value: number;
}

const NUMBER = /(?:\d+\.?\d*|\.\d+)(?:[eE][+-]?\d+)?/y;
const DANGLING_EXPONENT = /[eE][+-]?/y;
const NAME = /[\p{L}_][\p{L}\p{N}_]*/uy;
const WHITESPACE = /\s+/y;

/** Shortens the quoted expression so that a 500-character input does not make a 500-character message. */
function quote(expression: string): string {
  return JSON.stringify(shorten(expression, 40));
}

function describe(token: Token): string {
  if (token.kind === "end") return "end of input";
  return token.kind === "number" ? `number "${token.text}"` : `"${token.text}"`;
}

/** Python's floored modulo: the result takes the sign of the divisor (`-7 % 3 == 2`), unlike JS `%`. */
function flooredModulo(dividend: number, divisor: number): number {
  const remainder = dividend % divisor;
  return remainder !== 0 && (remainder < 0) !== (divisor < 0) ? remainder + divisor : remainder;
}

class Parser {
  #source: string;
  #index = 0;
  #depth = 0;
  #token: Token;

  constructor(source: string) {
    this.#source = source;
    this.#token = this.#lex();
  }

  parse(): number {
    if (this.#token.kind === "end") this.#fail("the expression is empty", null);
    const value = this.#expr();
    const token = this.#token;
    if (token.kind === ")") this.#fail(`unexpected ")" at position ${token.position} with no matching "("`);
    if (token.kind !== "end") {
      this.#fail(`unexpected ${describe(token)} at position ${token.position} after a complete expression`);
    }
    return value;
  }

  #fail(state: string, position: number | null = this.#token.position): never {
    throw new CalculatorError(`Cannot evaluate ${quote(this.#source)}: ${state}`, position);
  }

  /** Reads the next token lazily, so errors are reported in the order they appear in the input. */
  #lex(): Token {
    const source = this.#source;
    WHITESPACE.lastIndex = this.#index;
    if (WHITESPACE.test(source)) this.#index = WHITESPACE.lastIndex;
    const position = this.#index;
    if (position >= source.length) return { kind: "end", text: "", position, value: 0 };

    NUMBER.lastIndex = position;
    const number = NUMBER.exec(source);
    if (number) {
      const text = number[0];
      DANGLING_EXPONENT.lastIndex = position + text.length;
      if (DANGLING_EXPONENT.test(source)) {
        const end = DANGLING_EXPONENT.lastIndex;
        this.#fail(`malformed number "${source.slice(position, end)}" at position ${position}`, position);
      }
      const value = Number(text);
      if (!Number.isFinite(value)) {
        this.#fail(`number "${text}" at position ${position} is too large`, position);
      }
      this.#index = position + text.length;
      return { kind: "number", text, position, value };
    }

    const char = source[position];
    const text = char === "*" && source[position + 1] === "*" ? "**" : char;
    if ("+-*/%()".includes(char)) {
      this.#index = position + text.length;
      return { kind: char === "(" || char === ")" ? char : "operator", text, position, value: 0 };
    }

    NAME.lastIndex = position;
    const name = NAME.exec(source);
    if (name) {
      this.#fail(
        `unknown name "${name[0]}" at position ${position}; ` +
          "only numbers, + - * / % ** and parentheses are supported",
        position,
      );
    }
    const unknown = String.fromCodePoint(source.codePointAt(position)!);
    this.#fail(`unexpected character ${JSON.stringify(unknown)} at position ${position}`, position);
  }

  #advance(): Token {
    const token = this.#token;
    this.#token = this.#lex();
    return token;
  }

  #isOperator(...texts: string[]): boolean {
    return this.#token.kind === "operator" && texts.includes(this.#token.text);
  }

  /** Counts parentheses and unary signs together: both are what could exhaust the JS stack. */
  #enter(token: Token): void {
    this.#depth++;
    if (this.#depth > MAX_NESTING_DEPTH) {
      this.#fail(
        `nesting deeper than ${MAX_NESTING_DEPTH} levels of parentheses and unary signs ` +
          `at position ${token.position}`,
        token.position,
      );
    }
  }

  #expr(): number {
    let value = this.#term();
    while (this.#isOperator("+", "-")) {
      const operator = this.#advance();
      const right = this.#term();
      value = this.#checked(operator.text === "+" ? value + right : value - right, operator);
    }
    return value;
  }

  #term(): number {
    let value = this.#factor();
    while (this.#isOperator("*", "/", "%")) {
      const operator = this.#advance();
      const right = this.#factor();
      const at = operator.position;
      if (operator.text === "*") {
        value = this.#checked(value * right, operator);
      } else if (right === 0) {
        this.#fail(`${operator.text === "/" ? "division" : "modulo"} by zero at position ${at}`, at);
      } else {
        value = this.#checked(operator.text === "/" ? value / right : flooredModulo(value, right), operator);
      }
    }
    return value;
  }

  #factor(): number {
    if (!this.#isOperator("+", "-")) return this.#power();
    const sign = this.#advance();
    this.#enter(sign);
    const operand = this.#factor();
    this.#depth--;
    return sign.text === "-" ? -operand : operand;
  }

  /** `**` takes a whole `factor` on its right: that makes it right-associative and lets `2**-1` parse. */
  #power(): number {
    const base = this.#primary();
    if (!this.#isOperator("**")) return base;
    const operator = this.#advance();
    const exponent = this.#factor();
    const at = operator.position;
    if (base === 0 && exponent < 0) this.#fail(`zero raised to a negative power at position ${at}`, at);
    const value = base ** exponent;
    if (Number.isNaN(value)) {
      this.#fail(`"**" at position ${at} has no real result: a negative base needs a whole exponent`, at);
    }
    return this.#checked(value, operator);
  }

  #primary(): number {
    const token = this.#token;
    if (token.kind === "number") {
      this.#advance();
      return token.value;
    }
    if (token.kind !== "(") {
      this.#fail(`expected a number or "(" at position ${token.position}, got ${describe(token)}`);
    }
    this.#enter(token);
    this.#advance();
    const value = this.#expr();
    const close = this.#token;
    if (close.kind === "end") {
      this.#fail(`missing ")" at position ${close.position} to close "(" at position ${token.position}`);
    }
    if (close.kind !== ")") {
      this.#fail(`expected ")" or an operator at position ${close.position}, got ${describe(close)}`);
    }
    this.#advance();
    this.#depth--;
    return value;
  }

  /** Checks every intermediate result, so `1e308*10-1e308` fails instead of quietly becoming Infinity. */
  #checked(value: number, operator: Token): number {
    if (!Number.isFinite(value)) {
      const at = operator.position;
      this.#fail(`result of "${operator.text}" at position ${at} is too large (not a finite number)`, at);
    }
    return value;
  }
}

/**
 * Evaluates arithmetic with Python's float rules (`-2**2 == -4`, `2**3**2 == 512`, `-7 % 3 == 2`) in linear
 * time; a zero result is `0`, never `-0`. Throws `TypeError` for a non-string, `CalculatorError` (with
 * `position`) for input over {@linkcode MAX_EXPRESSION_LENGTH}, bad syntax, names, nesting deeper than
 * {@linkcode MAX_NESTING_DEPTH}, division or modulo by zero, and any non-finite or non-real result.
 */
export function evaluate(expression: string): number {
  if (typeof expression !== "string") {
    const got = expression === null ? "null" : Array.isArray(expression) ? "array" : typeof expression;
    throw new TypeError(`Cannot evaluate expression: expected a string, got ${got}`);
  }
  if (expression.length > MAX_EXPRESSION_LENGTH) {
    throw new CalculatorError(
      `Cannot evaluate ${quote(expression)}: it is ${expression.length} characters long, ` +
        `the limit is ${MAX_EXPRESSION_LENGTH}`,
      null,
    );
  }
  const value = new Parser(expression).parse();
  return value === 0 ? 0 : value;
}

/** The `calculator` tool: its handler returns `{expression, result}`, throwing as {@linkcode evaluate} does. */
export const calculatorTool: ToolSpec = {
  name: "calculator",
  safeToRepeat: true,
  description: "Evaluate an arithmetic expression with Python semantics. Supports numbers (12, 3.5, .5, " +
    "1e3, 2.5E-2), + - * / % **, unary + and -, and parentheses. ** is right-associative and binds tighter " +
    "than unary minus (-2**2 = -4). % is floored modulo: the result has the sign of the divisor " +
    `(-7 % 3 = 2). No names or functions (no sqrt, no pi). At most ${MAX_EXPRESSION_LENGTH} characters.`,
  parameters: {
    type: "object",
    properties: {
      expression: { type: "string", description: "The expression to evaluate, e.g. 12*(3+4)" },
    },
    required: ["expression"],
    additionalProperties: false,
  },
  handler(args) {
    const expression = args.expression as string;
    return { expression, result: evaluate(expression) };
  },
};
