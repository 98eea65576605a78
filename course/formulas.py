"""The small arithmetic a quiz question does with a learner's own measurement.

A measured question names values a lab recorded (``{why_batch.step_ms_1}``) and may compute with
them: ``let`` defines names (``c: "(why_batch.step_ms_8 - why_batch.step_ms_1) / 7"``), and its texts
hold ``{= expression}`` or ``{= expression :format}`` (``{= t0 / c :.0f}``). Expressions are plain
arithmetic, comparisons and a few functions, evaluated from the parsed syntax tree: nothing else
(no attribute but a lab's value, no call but those below) can run.

A recorded value is text with its unit ("21.0 ms", "1.23 s", "2.10 requests/s", "16"): `number`
reads it, and times are always in milliseconds in a formula ("1.23 s" is 1230).
"""
from __future__ import annotations

import ast
import math
import operator
import re

FUNCS = {"ceil": math.ceil, "floor": math.floor, "round": round, "min": min, "max": max, "abs": abs,
         "log": math.log}
BINARY = {ast.Add: operator.add, ast.Sub: operator.sub, ast.Mult: operator.mul, ast.Div: operator.truediv,
          ast.FloorDiv: operator.floordiv, ast.Pow: operator.pow, ast.Mod: operator.mod}
COMPARE = {ast.Lt: operator.lt, ast.LtE: operator.le, ast.Gt: operator.gt, ast.GtE: operator.ge,
           ast.Eq: operator.eq, ast.NotEq: operator.ne}
TEMPLATE = re.compile(r"\{=([^{}:]+)(?::([^{}]*))?\}")
NUMBER = re.compile(r"^\s*(-?\d[\d,]*(?:\.\d+)?|-?\.\d+)\s*(\S*)")


def number(text: str | None) -> float | None:
    """A recorded value as a number, times in ms; None for text that is not a number."""
    if text is None:
        return None
    m = NUMBER.match(str(text))
    if not m:
        return None
    value = float(m.group(1).replace(",", ""))
    return value * 1000 if m.group(2) == "s" else value


def evaluate(expression: str, env: dict) -> float:
    """`expression` over `env` ({name: number}, lab values as "lab.name" keys); ValueError if it
    uses anything else."""
    try:
        tree = ast.parse(expression.strip(), mode="eval")
    except SyntaxError as e:
        raise ValueError(f"cannot read {expression!r}: {e.msg}") from None
    return _eval(tree.body, env, expression)


def _eval(node, env: dict, source: str):
    if isinstance(node, ast.Constant) and isinstance(node.value, (int, float)) and not isinstance(node.value, bool):
        return node.value
    if isinstance(node, ast.Name):
        if node.id in env:
            return env[node.id]
        raise ValueError(f"{source!r}: unknown name {node.id!r}")
    if isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name):
        key = f"{node.value.id}.{node.attr}"
        if key in env:
            return env[key]
        raise ValueError(f"{source!r}: no value {key!r}")
    if isinstance(node, ast.BinOp) and type(node.op) in BINARY:
        return BINARY[type(node.op)](_eval(node.left, env, source), _eval(node.right, env, source))
    if isinstance(node, ast.UnaryOp) and isinstance(node.op, (ast.USub, ast.UAdd)):
        value = _eval(node.operand, env, source)
        return -value if isinstance(node.op, ast.USub) else value
    if isinstance(node, ast.Compare) and all(type(op) in COMPARE for op in node.ops):
        left = _eval(node.left, env, source)
        for op, right_node in zip(node.ops, node.comparators):
            right = _eval(right_node, env, source)
            if not COMPARE[type(op)](left, right):
                return False
            left = right
        return True
    if isinstance(node, ast.BoolOp):
        values = [_eval(v, env, source) for v in node.values]
        return all(values) if isinstance(node.op, ast.And) else any(values)
    if isinstance(node, ast.IfExp):
        return _eval(node.body if _eval(node.test, env, source) else node.orelse, env, source)
    if isinstance(node, ast.Call) and isinstance(node.func, ast.Name) and node.func.id in FUNCS and not node.keywords:
        return FUNCS[node.func.id](*[_eval(a, env, source) for a in node.args])
    raise ValueError(f"{source!r}: only arithmetic, comparisons and {', '.join(FUNCS)} are allowed")


def fill(text: str, env: dict) -> str:
    """`text` with every {= expression :format} replaced by its value (format default: 3 significant digits)."""
    def one(m):
        value = evaluate(m.group(1), env)
        spec = (m.group(2) or "").strip()
        return format(value, spec) if spec else f"{value:.3g}"
    return TEMPLATE.sub(one, text)
