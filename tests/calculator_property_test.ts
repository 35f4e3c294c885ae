/**
 * Property-based tests of the calculator (`src/tools/calculator.ts`): random well-formed expressions against
 * an exact rational reference, random garbage that must fail only with `CalculatorError`, linear work on
 * worst-case inputs, and the length and nesting limits.
 */
import { fc } from "./_fast_check.ts";
import assert from "node:assert/strict";
import {
  CalculatorError,
  evaluate,
  MAX_EXPRESSION_LENGTH,
  MAX_NESTING_DEPTH,
} from "../src/tools/calculator.ts";

// ---------------------------------------------------------------------------------------------------------
// Exact rationals on BigInt: the reference arithmetic, written independently of the parser and of floats.

interface Rational {
  n: bigint;
  d: bigint;
}

function gcd(a: bigint, b: bigint): bigint {
  a = a < 0n ? -a : a;
  b = b < 0n ? -b : b;
  while (b !== 0n) [a, b] = [b, a % b];
  return a;
}

function rational(n: bigint, d = 1n): Rational {
  if (d === 0n) throw new RangeError("zero denominator");
  if (d < 0n) [n, d] = [-n, -d];
  const g = gcd(n, d);
  return g > 1n ? { n: n / g, d: d / g } : { n, d };
}

const add = (a: Rational, b: Rational) => rational(a.n * b.d + b.n * a.d, a.d * b.d);
const sub = (a: Rational, b: Rational) => rational(a.n * b.d - b.n * a.d, a.d * b.d);
const mul = (a: Rational, b: Rational) => rational(a.n * b.n, a.d * b.d);
const div = (a: Rational, b: Rational) => rational(a.n * b.d, a.d * b.n);
const neg = (a: Rational) => rational(-a.n, a.d);
const isZero = (a: Rational) => a.n === 0n;

function power(base: Rational, exponent: number): Rational {
  const k = BigInt(Math.abs(exponent));
  const raised = rational(base.n ** k, base.d ** k);
  return exponent < 0 ? div(rational(1n), raised) : raised;
}

/** Parses a decimal literal (`12`, `.5`, `5.`, `2.5E-2`) digit by digit, without `Number()`. */
function parseDecimal(text: string): Rational {
  const match = /^(\d*)(?:\.(\d*))?(?:[eE]([+-]?\d+))?$/.exec(text);
  if (match === null) throw new SyntaxError(`not a literal: ${text}`);
  const [, whole, fraction = "", exponentText = "0"] = match;
  const mantissa = BigInt((whole + fraction) || "0");
  const exponent = Number(exponentText) - fraction.length;
  return exponent >= 0
    ? rational(mantissa * 10n ** BigInt(exponent))
    : rational(mantissa, 10n ** BigInt(-exponent));
}

/** The nearest float to `r`, via a 21-significant-digit decimal string (correctly rounded by the parser). */
function toNumber(r: Rational): number {
  if (r.n === 0n) return 0;
  const magnitude = (r.n < 0n ? -r.n : r.n).toString().length - r.d.toString().length;
  const shift = 21 - magnitude;
  const scaled = shift >= 0 ? (r.n * 10n ** BigInt(shift)) / r.d : r.n / (r.d * 10n ** BigInt(-shift));
  return Number(`${scaled}e${-shift}`);
}

/** Whether `r` is exactly a double (a dyadic rational with a 53-bit numerator, far from subnormals). */
function isDouble(r: Rational): boolean {
  const abs = r.n < 0n ? -r.n : r.n;
  return (r.d & (r.d - 1n)) === 0n && abs < 2n ** 53n && r.d <= 2n ** 1000n;
}

// ---------------------------------------------------------------------------------------------------------
// Expressions: an AST, a printer that follows Python's precedence, and a reference evaluation.

type Ast =
  | { kind: "num"; text: string }
  | { kind: "sign"; op: "+" | "-"; operand: Ast; parens: number; ws: string }
  | { kind: "bin"; op: "+" | "-" | "*" | "/"; left: Ast; right: Ast; parens: number; ws: string }
  | { kind: "pow"; base: Ast; exponent: Ast; parens: number; ws: string };

/** Binding levels of the grammar: expr 1, term 2, factor (unary) 3, power 4, primary 5. */
function level(node: Ast): number {
  switch (node.kind) {
    case "num":
      return 5;
    case "pow":
      return 4;
    case "sign":
      return 3;
    case "bin":
      return node.op === "+" || node.op === "-" ? 1 : 2;
  }
}

/** Prints `node` where the grammar expects at least `required`; adds the redundant parentheses it carries. */
function print(node: Ast, required: number): string {
  if (node.kind === "num") return level(node) < required ? `(${node.text})` : node.text;
  const { ws } = node;
  let text: string;
  switch (node.kind) {
    case "sign":
      text = `${node.op}${ws}${print(node.operand, 3)}`;
      break;
    case "pow":
      text = `${print(node.base, 5)}${ws}**${ws}${print(node.exponent, 3)}`;
      break;
    case "bin": {
      const additive = node.op === "+" || node.op === "-";
      // Left-associative: the right operand must bind tighter than the operator itself.
      text = `${print(node.left, additive ? 1 : 2)}${ws}${node.op}${ws}${
        print(node.right, additive ? 2 : 3)
      }`;
      break;
    }
  }
  const wraps = node.parens + (level(node) < required ? 1 : 0);
  for (let i = 0; i < wraps; i++) text = `(${ws}${text}${ws})`;
  return text;
}

/**
 * The reference outcome: an exact value with a bound on the float error the calculator may make, a certain
 * CalculatorError (division by an exactly zero float), or `unknown` when floats alone decide (a divisor
 * whose error bound reaches zero, a value out of float range): then only "finite or CalculatorError" holds.
 */
type Outcome = { kind: "value"; exact: Rational; err: number } | { kind: "error" } | { kind: "unknown" };

const U = 2 ** -53;
/** Beyond this the calculator may overflow while the exact value does not; such cases are skipped. */
const RANGE = 1e300;

function value(exact: Rational, err: number, exactInputs: boolean): Outcome {
  const approx = Math.abs(toNumber(exact));
  if (approx > RANGE || (approx !== 0 && approx < 1e-280) || !Number.isFinite(err)) {
    return { kind: "unknown" };
  }
  // Exact inputs and an exactly representable result: IEEE operations are correctly rounded, so no error.
  return { kind: "value", exact, err: exactInputs && isDouble(exact) ? 0 : err };
}

/** Evaluates `node` exactly, with a running bound on the calculator's accumulated float error. */
function reference(node: Ast): Outcome {
  switch (node.kind) {
    case "num": {
      const exact = parseDecimal(node.text);
      return value(exact, Math.abs(toNumber(exact)) * U, true);
    }
    case "sign": {
      const operand = reference(node.operand);
      if (operand.kind !== "value") return operand;
      return { ...operand, exact: node.op === "-" ? neg(operand.exact) : operand.exact };
    }
    case "bin":
    case "pow": {
      const [l, r] = node.kind === "bin"
        ? [reference(node.left), reference(node.right)]
        : [reference(node.base), reference(node.exponent)];
      if (l.kind === "unknown" || r.kind === "unknown") return { kind: "unknown" };
      if (l.kind === "error" || r.kind === "error") return { kind: "error" };
      const a = Math.abs(toNumber(l.exact));
      const b = Math.abs(toNumber(r.exact));
      const [ea, eb] = [l.err, r.err];
      const [A, B] = [a + ea, b + eb];
      const exactInputs = ea === 0 && eb === 0;
      if (node.kind === "pow") {
        if (eb !== 0 || r.exact.d !== 1n) return { kind: "unknown" };
        const k = Number(r.exact.n);
        if (k === 0) return value(rational(1n), 0, true);
        if (k < 0 && isZero(l.exact)) return ea === 0 ? { kind: "error" } : { kind: "unknown" };
        const m = Math.abs(k);
        // V8's pow (fdlibm) special-cases y = 1, -1 and 2 as x, 1/x and x*x: correctly rounded.
        const exactPow = exactInputs && (k === 1 || k === 2 || k === -1);
        // |â^m − a^m| ≤ m·A^(m−1)·ea, plus the rounding of Math.pow (a few ulps; 8 to be generous).
        if (k > 0) return value(power(l.exact, k), m * A ** (m - 1) * ea + 8 * U * A ** m, exactPow);
        const low = a - ea;
        if (!(low > 0)) return { kind: "unknown" };
        return value(
          power(l.exact, k),
          (m * A ** (m - 1) * ea) / (a ** m * low ** m) + 8 * U / low ** m,
          exactPow,
        );
      }
      switch (node.op) {
        case "+":
          return value(add(l.exact, r.exact), ea + eb + U * (A + B), exactInputs);
        case "-":
          return value(sub(l.exact, r.exact), ea + eb + U * (A + B), exactInputs);
        case "*":
          return value(mul(l.exact, r.exact), A * eb + B * ea + U * A * B, exactInputs);
        case "/": {
          if (isZero(r.exact)) return eb === 0 ? { kind: "error" } : { kind: "unknown" };
          const low = b - eb;
          if (!(low > 0)) return { kind: "unknown" };
          return value(div(l.exact, r.exact), (a * eb + b * ea) / (b * low) + U * A / low, exactInputs);
        }
      }
    }
  }
}

// ---------------------------------------------------------------------------------------------------------
// Arbitraries.

const WS = fc.constantFrom("", "", "", "", " ", "  ", "\t", "\n", " \r\n ");
const PARENS = fc.oneof({ weight: 8, arbitrary: fc.constant(0) }, {
  weight: 1,
  arbitrary: fc.integer({ min: 1, max: 2 }),
});

const LITERAL: fc.Arbitrary<Ast> = fc.oneof(
  fc.nat({ max: 999 }).map(String),
  fc.tuple(fc.nat({ max: 99 }), fc.stringMatching(/^[0-9]{1,3}$/)).map(([i, f]) => `${i}.${f}`),
  fc.stringMatching(/^[0-9]{1,2}$/).map((f) => `.${f}`),
  fc.nat({ max: 99 }).map((i) => `${i}.`),
  fc.tuple(
    fc.oneof(fc.nat({ max: 99 }).map(String), fc.stringMatching(/^[0-9]\.[0-9]{1,2}$/)),
    fc.constantFrom("e", "E"),
    fc.constantFrom("", "+", "-"),
    fc.nat({ max: 3 }),
  ).map(([m, e, s, x]) => `${m}${e}${s}${x}`),
).map((text) => ({ kind: "num" as const, text }));

const SMALL = (max: number) => fc.nat({ max }).map((n): Ast => ({ kind: "num", text: String(n) }));

/** Exponents are small whole numbers: a literal, a negated literal, or a tiny power of literals. */
const EXPONENT: fc.Arbitrary<Ast> = fc.oneof(
  { weight: 4, arbitrary: SMALL(4) },
  {
    weight: 2,
    arbitrary: fc.tuple(SMALL(3), PARENS, WS).map(([operand, parens, ws]): Ast => ({
      kind: "sign",
      op: "-",
      operand,
      parens,
      ws,
    })),
  },
  {
    weight: 1,
    arbitrary: fc.tuple(SMALL(2), SMALL(2), PARENS, WS).map(([base, exponent, parens, ws]): Ast => ({
      kind: "pow",
      base,
      exponent,
      parens,
      ws,
    })),
  },
);

const { expr: EXPRESSION } = fc.letrec<{ expr: Ast }>((tie) => ({
  expr: fc.oneof(
    { maxDepth: 8, depthSize: "xlarge" },
    { weight: 3, arbitrary: LITERAL },
    {
      weight: 1,
      arbitrary: fc.tuple(fc.constantFrom("-" as const, "+" as const), tie("expr"), PARENS, WS).map((
        [op, operand, parens, ws],
      ): Ast => ({ kind: "sign", op, operand, parens, ws })),
    },
    {
      weight: 4,
      arbitrary: fc.tuple(
        fc.constantFrom("+" as const, "-" as const, "*" as const, "/" as const),
        tie("expr"),
        tie("expr"),
        PARENS,
        WS,
      ).map(([op, left, right, parens, ws]): Ast => ({ kind: "bin", op, left, right, parens, ws })),
    },
    {
      weight: 1,
      arbitrary: fc.tuple(tie("expr"), EXPONENT, PARENS, WS).map(([base, exponent, parens, ws]): Ast => ({
        kind: "pow",
        base,
        exponent,
        parens,
        ws,
      })),
    },
  ),
}));

const SOURCE = fc.tuple(EXPRESSION, WS, WS).map(([ast, before, after]) => ({
  ast,
  text: `${before}${print(ast, 1)}${after}`,
}));

/** Runs `evaluate`, turning a CalculatorError into a value and failing on anything else thrown. */
function attempt(expression: string): { ok: true; value: number } | { ok: false; error: CalculatorError } {
  try {
    return { ok: true, value: evaluate(expression) };
  } catch (error) {
    if (error instanceof CalculatorError) return { ok: false, error };
    throw new assert.AssertionError({ message: `evaluate(${JSON.stringify(expression)}) threw ${error}` });
  }
}

/** A finite number, never -0 (the documented contract), or a CalculatorError with a sane position. */
function assertContract(expression: string): ReturnType<typeof attempt> {
  const outcome = attempt(expression);
  if (outcome.ok) {
    assert.ok(Number.isFinite(outcome.value), `${JSON.stringify(expression)} gave ${outcome.value}`);
    assert.ok(!Object.is(outcome.value, -0), `${JSON.stringify(expression)} gave -0`);
  } else {
    const { position } = outcome.error;
    assert.ok(
      position === null || (Number.isInteger(position) && position >= 0 && position <= expression.length),
      `position ${position} for ${JSON.stringify(expression)}`,
    );
  }
  return outcome;
}

// ---------------------------------------------------------------------------------------------------------
// Properties.

Deno.test("evaluate() agrees with exact rational arithmetic on random well-formed expressions", () => {
  const counts = { compared: 0, errors: 0, skipped: 0 };
  fc.assert(
    fc.property(SOURCE, ({ ast, text }) => {
      const outcome = assertContract(text);
      if (text.length > MAX_EXPRESSION_LENGTH) {
        assert.ok(!outcome.ok && outcome.error.position === null, "over-long input is rejected up front");
        counts.skipped++;
        return;
      }
      const expected = reference(ast);
      if (expected.kind === "unknown") {
        counts.skipped++;
        return;
      }
      if (expected.kind === "error") {
        assert.ok(!outcome.ok, `${JSON.stringify(text)} should fail, gave ${outcome.ok && outcome.value}`);
        counts.errors++;
        return;
      }
      assert.ok(outcome.ok, `${JSON.stringify(text)} failed: ${!outcome.ok && outcome.error.message}`);
      const exact = toNumber(expected.exact);
      // Relative tolerance 1e-9, widened by the running error bound where cancellation makes it meaningless.
      const tolerance = Math.max(1e-9 * Math.abs(exact), 4 * expected.err);
      assert.ok(
        Math.abs(outcome.value - exact) <= tolerance,
        `${JSON.stringify(text)}: calculator ${outcome.value}, exact ${exact} (tolerance ${tolerance})`,
      );
      counts.compared++;
    }),
    { numRuns: 3000 },
  );
  // Guard against a vacuous property: most cases must really be compared.
  assert.ok(counts.compared > 2000, JSON.stringify(counts));
});

Deno.test("evaluate() applies Python precedence: ** right-assoc, over unary minus, unary minus over *", () => {
  // Precedence spelled out by the printer above, checked against fixed points of the grammar.
  const num = (text: string): Ast => ({ kind: "num", text });
  const minus = (operand: Ast): Ast => ({ kind: "sign", op: "-", operand, parens: 0, ws: "" });
  const pow = (base: Ast, exponent: Ast): Ast => ({ kind: "pow", base, exponent, parens: 0, ws: "" });
  const times = (left: Ast, right: Ast): Ast => ({ kind: "bin", op: "*", left, right, parens: 0, ws: "" });
  const table: [Ast, string, number][] = [
    [minus(pow(num("2"), num("2"))), "-2**2", -4],
    [pow(minus(num("2")), num("2")), "(-2)**2", 4],
    [pow(num("2"), pow(num("3"), num("2"))), "2**3**2", 512],
    [pow(pow(num("2"), num("3")), num("2")), "(2**3)**2", 64],
    [pow(num("2"), minus(num("1"))), "2**-1", 0.5],
    [times(minus(num("2")), num("3")), "-2*3", -6],
    [minus(times(num("2"), num("3"))), "-(2*3)", -6],
  ];
  for (const [ast, text, expected] of table) {
    assert.equal(print(ast, 1), text);
    assert.equal(evaluate(text), expected, text);
    const ref = reference(ast);
    assert.ok(ref.kind === "value" && toNumber(ref.exact) === expected, text);
  }
});

const ALPHABET = fc.constantFrom(..."0123456789.eE+-*/%() ".split(""), "**", "(", ")", "1");

Deno.test("evaluate() fails on random strings only with CalculatorError, or returns a finite number", () => {
  const property = fc.property(
    fc.oneof(
      fc.string({ maxLength: 80 }),
      fc.string({ unit: "binary", maxLength: 80 }),
      fc.string({ unit: "grapheme", maxLength: 80 }),
      fc.string({ unit: ALPHABET, maxLength: 600 }),
      fc.string({ unit: ALPHABET, minLength: 480, maxLength: 520 }),
    ),
    (text) => {
      assertContract(text);
    },
  );
  fc.assert(property, { numRuns: 3000 });
});

/**
 * A deterministic proxy for the parser's work: the lexer's regex executions (one or two per token) and the
 * parser's operator checks (`Array.prototype.includes` in `#isOperator`). Both prototypes are restored.
 */
function countWork(expression: string): number {
  const exec = RegExp.prototype.exec;
  const includes = Array.prototype.includes;
  let count = 0;
  RegExp.prototype.exec = function (this: RegExp, input: string) {
    count++;
    return exec.call(this, input);
  };
  Array.prototype.includes = function (this: unknown[], ...args: [unknown, number?]) {
    count++;
    return includes.apply(this, args);
  };
  try {
    attempt(expression);
  } finally {
    RegExp.prototype.exec = exec;
    Array.prototype.includes = includes;
  }
  return count;
}

/** Worst-case shapes, each built to a given length (at most the 500-character limit). */
const SHAPES: Record<string, (length: number) => string> = {
  "1+1+…": (n) => "1+".repeat(Math.floor((n - 1) / 2)) + "1",
  "2**1**1…": (n) => "2" + "**1".repeat(Math.floor((n - 1) / 3)),
  "((1))+((1))…, depth 40": (n) => {
    const group = "(".repeat(40) + "1" + ")".repeat(40);
    return Array(Math.max(1, Math.floor((n + 1) / (group.length + 1)))).fill(group).join("+");
  },
  "-+-+…1, runs of 90 signs": (n) => {
    const group = "(" + "-+".repeat(45) + "1)";
    return Array(Math.max(1, Math.floor((n + 1) / (group.length + 1)))).fill(group).join("*");
  },
  "111…1": (n) => "1".repeat(n),
  "spaces then 1": (n) => " ".repeat(n - 1) + "1",
  "1e…(dangling)": (n) => "1".repeat(n - 1) + "e",
  "1+1+…+ (trailing error)": (n) => "1+".repeat(Math.floor(n / 2)),
};

Deno.test("evaluate() does work linear in the input: counted steps grow at most proportionally", () => {
  for (const [name, build] of Object.entries(SHAPES)) {
    const small = build(120);
    const large = build(480);
    assert.ok(large.length <= MAX_EXPRESSION_LENGTH, name);
    const [a, b] = [countWork(small), countWork(large)];
    // Linear work: 4x the input gives at most ~4x the steps (plus a constant), never 16x.
    const ratio = large.length / small.length;
    assert.ok(
      b <= ratio * a * 1.25 + 20,
      `${name}: ${a} steps for ${small.length} chars, ${b} for ${large.length}`,
    );
    assert.ok(b <= 4 * large.length + 20, `${name}: ${b} steps for ${large.length} chars`);
  }
});

Deno.test("evaluate() settles every 500-character worst case with a value or a CalculatorError", () => {
  for (const build of Object.values(SHAPES)) {
    const input = build(500);
    assert.ok(input.length <= MAX_EXPRESSION_LENGTH);
    // attempt() fails the test for anything thrown but a CalculatorError; the work is counted above.
    attempt(input);
  }
  assert.deepEqual(attempt("(".repeat(100) + "1" + ")".repeat(100)), { ok: true, value: 1 });
  const deeper = attempt("(".repeat(101) + "1" + ")".repeat(101));
  assert.ok(!deeper.ok && /nest/.test(deeper.error.message), JSON.stringify(deeper));
});

const SMALL_VALID = fc.tuple(fc.array(fc.nat({ max: 999 }), { minLength: 1, maxLength: 30 }), WS)
  .map(([terms, ws]) => ({ text: terms.join(`${ws}+${ws}`), value: terms.reduce((s, t) => s + t, 0) }));

Deno.test("evaluate() accepts exactly 500 characters and rejects 501, for random valid expressions", () => {
  fc.assert(
    fc.property(SMALL_VALID, fc.nat(), ({ text, value }, split) => {
      const pad = (total: number) => {
        const spaces = total - text.length;
        const before = split % (spaces + 1);
        return " ".repeat(before) + text + " ".repeat(spaces - before);
      };
      const ok = pad(MAX_EXPRESSION_LENGTH);
      assert.equal(ok.length, 500);
      assert.equal(evaluate(ok), value);
      const over = pad(MAX_EXPRESSION_LENGTH + 1);
      assert.throws(() => evaluate(over), (error: unknown) => {
        assert.ok(error instanceof CalculatorError);
        assert.equal(error.position, null);
        assert.match(error.message, /it is 501 characters long, the limit is 500$/);
        return true;
      });
    }),
    { numRuns: 300 },
  );
});

/** A random mix of `(` and unary signs, `depth` deep, around `7`, with the parentheses closed. */
const NESTING = (depth: number) =>
  fc.tuple(
    fc.array(fc.constantFrom("(", "-", "+"), { minLength: depth, maxLength: depth }),
    fc.constantFrom("", " "),
  ).map((
    [openers, ws],
  ) => ({
    text: openers.join(ws) + "7" + ")".repeat(openers.filter((o) => o === "(").length),
    value: openers.filter((o) => o === "-").length % 2 === 0 ? 7 : -7,
  }));

Deno.test("evaluate() accepts nesting depth 100 and rejects 101, parentheses and signs counted together", () => {
  fc.assert(
    fc.property(NESTING(MAX_NESTING_DEPTH), NESTING(MAX_NESTING_DEPTH + 1), (ok, over) => {
      assert.equal(evaluate(ok.text), ok.value);
      assert.throws(() => evaluate(over.text), (error: unknown) => {
        assert.ok(error instanceof CalculatorError);
        assert.match(error.message, /nesting deeper than 100 levels/);
        return true;
      });
      // Depth is nesting, not a total: two depth-100 groups side by side are fine.
      const compact = ok.text.replaceAll(" ", "");
      assert.equal(evaluate(`${compact}+${compact}`), 2 * ok.value);
    }),
    { numRuns: 200 },
  );
});

const FLOAT_LITERAL = fc.oneof(
  fc.nat({ max: 20 }).map(String),
  fc.stringMatching(/^[0-9]{1,3}\.[0-9]{0,3}$/),
  fc.stringMatching(/^[0-9]{1,3}[eE][+-]?[0-9]{1,3}$/),
);
const SIGNED = fc.tuple(fc.boolean(), FLOAT_LITERAL).map(([negative, text]) => ({
  text: negative ? `(-${text})` : text,
  value: negative ? -Number(text) : Number(text),
}));

Deno.test("evaluate() gives a**b**c exactly JS's a**(b**c) when that is finite and real, else CalculatorError", () => {
  fc.assert(
    fc.property(SIGNED, SIGNED, SIGNED, (a, b, c) => {
      const text = `${a.text}**${b.text}**${c.text}`;
      const literalsFinite = [a, b, c].every((x) => Number.isFinite(x.value));
      const exponent = b.value ** c.value;
      const result = a.value ** exponent;
      const fails = !literalsFinite || !Number.isFinite(exponent) || (a.value === 0 && exponent < 0) ||
        !Number.isFinite(result) || (b.value === 0 && c.value < 0);
      const outcome = assertContract(text);
      if (fails) {
        assert.ok(!outcome.ok, `${text} should fail, gave ${outcome.ok && outcome.value}`);
      } else {
        assert.ok(outcome.ok, `${text} failed: ${!outcome.ok && outcome.error.message}`);
        assert.equal(outcome.value, result === 0 ? 0 : result, text);
      }
    }),
    { numRuns: 2000 },
  );
});
