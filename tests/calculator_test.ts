import assert from "node:assert/strict";
import {
  CalculatorError,
  calculatorTool,
  evaluate,
  MAX_EXPRESSION_LENGTH,
  MAX_NESTING_DEPTH,
} from "../src/tools/calculator.ts";

/** Asserts that `expression` fails with a CalculatorError carrying exactly this message and position. */
function assertFails(expression: string, message: string, position: number | null): void {
  assert.throws(
    () => evaluate(expression),
    (error: unknown) => {
      assert.ok(error instanceof CalculatorError, `expected a CalculatorError, got ${error}`);
      assert.equal(error.name, "CalculatorError");
      assert.equal(error.message, message);
      assert.equal(error.position, position);
      return true;
    },
  );
}

Deno.test("evaluate() computes 12*(3+4) as 84", () => {
  assert.equal(evaluate("12*(3+4)"), 84);
});

Deno.test("evaluate() follows the usual precedence and left associativity", () => {
  const table: [string, number][] = [
    ["1+2*3", 7],
    ["(1+2)*3", 9],
    ["10-4-3", 3],
    ["100/10/5", 2],
    ["2*3%4", 2],
    ["7%4*2", 6],
    ["1+2**3*2", 17],
    ["2*3**2", 18],
    ["8-2+1", 7],
    ["1-(2-3)", 2],
    ["2*-3", -6],
    ["2--3", 5],
    ["2+-+-3", 5],
  ];
  for (const [expression, expected] of table) {
    assert.equal(evaluate(expression), expected, expression);
  }
});

Deno.test("evaluate() gives ** Python's right associativity and precedence over unary minus", () => {
  const table: [string, number][] = [
    ["-2**2", -4],
    ["2**-1", 0.5],
    ["2**3**2", 512],
    ["(2**3)**2", 64],
    ["(-2)**2", 4],
    ["-2**-2**2", -0.0625],
    ["2**-1**2", 0.5],
    ["+2**2", 4],
    ["0**0", 1],
  ];
  for (const [expression, expected] of table) {
    assert.equal(evaluate(expression), expected, expression);
  }
});

Deno.test("evaluate() stacks unary signs", () => {
  assert.equal(evaluate("--3"), 3);
  assert.equal(evaluate("---3"), -3);
  assert.equal(evaluate("+-+3"), -3);
  assert.equal(evaluate("-(-(3))"), 3);
});

Deno.test("evaluate() uses Python's floored modulo: the result has the sign of the divisor", () => {
  assert.equal(evaluate("-7 % 3"), 2);
  assert.equal(evaluate("7 % -3"), -2);
  assert.equal(evaluate("-7 % -3"), -1);
  assert.equal(evaluate("7 % 3"), 1);
  assert.equal(evaluate("-7.5 % 2"), 0.5);
  assert.equal(evaluate("6 % -3"), 0);
});

Deno.test("evaluate() reads decimals, leading and trailing dots, and exponent notation", () => {
  const table: [string, number][] = [
    ["3.5", 3.5],
    [".5", 0.5],
    ["5.", 5],
    ["0.1+0.2", 0.1 + 0.2],
    ["1/4", 0.25],
    ["1e3", 1000],
    ["2.5E-2", 0.025],
    ["1e+2", 100],
    ["5.e1", 50],
    [".5e1", 5],
    ["1e-400", 0],
  ];
  for (const [expression, expected] of table) {
    assert.equal(evaluate(expression), expected, expression);
  }
});

Deno.test("evaluate() ignores whitespace, including tabs and newlines", () => {
  assert.equal(evaluate("  12 *\t( 3 +\n4 )  "), 84);
  assert.equal(evaluate("2 ** 3"), 8);
});

Deno.test("evaluate() never returns negative zero", () => {
  assert.ok(Object.is(evaluate("-0"), 0));
  assert.ok(Object.is(evaluate("0*-1"), 0));
});

Deno.test("evaluate() rejects empty and whitespace-only expressions without a position", () => {
  assertFails("", 'Cannot evaluate "": the expression is empty', null);
  assertFails("   ", 'Cannot evaluate "   ": the expression is empty', null);
});

Deno.test("evaluate() reports an operand missing at the end of input", () => {
  assertFails("2+", 'Cannot evaluate "2+": expected a number or "(" at position 2, got end of input', 2);
});

Deno.test("evaluate() reports an unexpected token where an operand belongs", () => {
  assertFails("2+*3", 'Cannot evaluate "2+*3": expected a number or "(" at position 2, got "*"', 2);
  assertFails("()", 'Cannot evaluate "()": expected a number or "(" at position 1, got ")"', 1);
  assertFails("2//3", 'Cannot evaluate "2//3": expected a number or "(" at position 2, got "/"', 2);
});

Deno.test("evaluate() reports a missing closing parenthesis with both positions", () => {
  assertFails("(1+2", 'Cannot evaluate "(1+2": missing ")" at position 4 to close "(" at position 0', 4);
  assertFails(
    "(1 2)",
    'Cannot evaluate "(1 2)": expected ")" or an operator at position 3, got number "2"',
    3,
  );
});

Deno.test("evaluate() reports trailing input after a complete expression", () => {
  assertFails(
    "1 2",
    'Cannot evaluate "1 2": unexpected number "2" at position 2 after a complete expression',
    2,
  );
  assertFails("1+2)", 'Cannot evaluate "1+2)": unexpected ")" at position 3 with no matching "("', 3);
  assertFails(
    "1.2.3",
    'Cannot evaluate "1.2.3": unexpected number ".3" at position 3 after a complete expression',
    3,
  );
});

Deno.test("evaluate() reports unknown characters with their position", () => {
  assertFails("2 & 3", 'Cannot evaluate "2 & 3": unexpected character "&" at position 2', 2);
  assertFails("1+.", 'Cannot evaluate "1+.": unexpected character "." at position 2', 2);
  assertFails("1+😀", 'Cannot evaluate "1+😀": unexpected character "😀" at position 2', 2);
});

Deno.test("evaluate() rejects names such as functions and constants", () => {
  const hint = "only numbers, + - * / % ** and parentheses are supported";
  assertFails("sqrt(2)", `Cannot evaluate "sqrt(2)": unknown name "sqrt" at position 0; ${hint}`, 0);
  assertFails("pi", `Cannot evaluate "pi": unknown name "pi" at position 0; ${hint}`, 0);
  assertFails("2*x_1", `Cannot evaluate "2*x_1": unknown name "x_1" at position 2; ${hint}`, 2);
});

Deno.test("evaluate() rejects a malformed exponent instead of reading it as a name", () => {
  assertFails("1e", 'Cannot evaluate "1e": malformed number "1e" at position 0', 0);
  assertFails("3+2e-", 'Cannot evaluate "3+2e-": malformed number "2e-" at position 2', 2);
});

Deno.test("evaluate() reports division and modulo by zero at the operator", () => {
  assertFails("1/0", 'Cannot evaluate "1/0": division by zero at position 1', 1);
  assertFails("5 % (2-2)", 'Cannot evaluate "5 % (2-2)": modulo by zero at position 2', 2);
  assertFails("1/-0", 'Cannot evaluate "1/-0": division by zero at position 1', 1);
  assertFails("0**-1", 'Cannot evaluate "0**-1": zero raised to a negative power at position 1', 1);
});

Deno.test("evaluate() rejects non-finite results, including intermediate ones", () => {
  assertFails(
    "9**9**9",
    'Cannot evaluate "9**9**9": result of "**" at position 1 is too large (not a finite number)',
    1,
  );
  assertFails(
    "1e308*10",
    'Cannot evaluate "1e308*10": result of "*" at position 5 is too large (not a finite number)',
    5,
  );
  assertFails(
    "1e308*10/1e308",
    'Cannot evaluate "1e308*10/1e308": result of "*" at position 5 is too large (not a finite number)',
    5,
  );
  assertFails(
    "1e308+1e308",
    'Cannot evaluate "1e308+1e308": result of "+" at position 5 is too large (not a finite number)',
    5,
  );
  assertFails("1e400", 'Cannot evaluate "1e400": number "1e400" at position 0 is too large', 0);
});

Deno.test("evaluate() rejects a negative base with a fractional exponent, which has no real result", () => {
  assertFails(
    "(-8)**(1/3)",
    'Cannot evaluate "(-8)**(1/3)": "**" at position 4 has no real result: a negative base needs a whole exponent',
    4,
  );
});

Deno.test("evaluate() accepts exactly 500 characters and rejects 501 before parsing", () => {
  assert.equal(MAX_EXPRESSION_LENGTH, 500);
  const ok = "1+".repeat(249) + "1" + " "; // 500 characters
  assert.equal(ok.length, 500);
  assert.equal(evaluate(ok), 250);

  // The 501-character input is also malformed: the length check must win over the syntax error.
  const tooLong = "(".repeat(501);
  assert.throws(
    () => evaluate(tooLong),
    (error: unknown) => {
      assert.ok(error instanceof CalculatorError);
      assert.equal(
        error.message,
        `Cannot evaluate ${
          JSON.stringify("(".repeat(40) + "…")
        }: it is 501 characters long, the limit is 500`,
      );
      assert.equal(error.position, null);
      return true;
    },
  );
});

Deno.test("evaluate() accepts 100 levels of nesting and rejects 101", () => {
  assert.equal(MAX_NESTING_DEPTH, 100);
  assert.equal(evaluate("(".repeat(100) + "7" + ")".repeat(100)), 7);
  assert.equal(evaluate("-".repeat(100) + "7"), 7);
  assert.equal(evaluate("-(".repeat(50) + "7" + ")".repeat(50)), 7);

  const state = "nesting deeper than 100 levels of parentheses and unary signs at position 100";
  for (const expression of ["(".repeat(101) + "7" + ")".repeat(101), "-".repeat(101) + "7"]) {
    assertFails(
      expression,
      `Cannot evaluate ${JSON.stringify(expression.slice(0, 40) + "…")}: ${state}`,
      100,
    );
  }
});

Deno.test("evaluate() fails on deep nesting with a CalculatorError, not a stack overflow", () => {
  const expression = "(".repeat(250) + ")".repeat(250);
  assert.throws(() => evaluate(expression), CalculatorError);
});

Deno.test("evaluate() throws TypeError for a non-string input", () => {
  for (const [input, got] of [[42, "number"], [null, "null"], [undefined, "undefined"], [["1"], "array"]]) {
    assert.throws(
      () => evaluate(input as unknown as string),
      new TypeError(`Cannot evaluate expression: expected a string, got ${got}`),
    );
  }
});

// That the work is linear in the input is counted, not timed: see calculator_property_test.ts.
Deno.test("evaluate() sums a long expression nested 50 deep", () => {
  const expression = "(".repeat(50) + "1" + "+1".repeat(199) + ")".repeat(50);
  assert.ok(expression.length <= 500);
  assert.equal(evaluate(expression), 200);
});

Deno.test("calculatorTool declares a strict schema with one required string argument", () => {
  assert.equal(calculatorTool.name, "calculator");
  assert.deepEqual(calculatorTool.parameters, {
    type: "object",
    properties: {
      expression: { type: "string", description: "The expression to evaluate, e.g. 12*(3+4)" },
    },
    required: ["expression"],
    additionalProperties: false,
  });
  assert.match(calculatorTool.description, /floored modulo/);
  assert.match(calculatorTool.description, /sign of the divisor/);
});

Deno.test("calculatorTool handler returns {expression, result}", async () => {
  const output = await calculatorTool.handler({ expression: "12*(3+4)" }, { sessionId: "s1", userId: "u1" });
  assert.deepEqual(output, { expression: "12*(3+4)", result: 84 });
});

Deno.test("calculatorTool handler throws CalculatorError for the registry to report", () => {
  assert.throws(
    () => calculatorTool.handler({ expression: "1/0" }, { sessionId: "s1", userId: "u1" }),
    { name: "CalculatorError", message: 'Cannot evaluate "1/0": division by zero at position 1' },
  );
});
