"""Evaluating an expr-lang tree with the environment Argo gives ``{{= ...}}`` tags.

Semantics follow expr-lang's VM (``vm/runtime``): ``==`` is deep equality with no string/number
coercion (``1 == 1.0`` holds, ``'1' == 1`` does not); ``+`` adds numbers, joins strings and
arrays; ``/`` always gives a float; ``&&``, ``||``, ``!`` and ``?:`` want booleans; a missing
map key is ``nil``; fetching from ``nil`` is an error unless ``?.`` says otherwise. Bounded:
every node visited counts against a step budget, and every string, array and map made is
checked against a size limit, so no expression runs long or grows large.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping, Sequence
from typing import Any, TypeVar

from placement.expression.syntax import ExprError, Node

MAX_STEPS = 200_000
MAX_VALUE_CHARS = 1 << 20
MAX_ITEMS = 100_000
_INT64 = (-(1 << 63), (1 << 63) - 1)

_T = TypeVar("_T")


class Budget:
    """Evaluation steps left; ``spend`` raises once they are gone."""

    def __init__(self, steps: int = MAX_STEPS) -> None:
        self.left = steps

    def spend(self, n: int = 1) -> None:
        self.left -= n
        if self.left < 0:
            raise ExprError(f"expression takes more than {MAX_STEPS} steps")


def bounded(value: _T) -> _T:
    """``value`` when it is within the size limits, else ``ExprError``."""
    if isinstance(value, str) and len(value) > MAX_VALUE_CHARS:
        raise ExprError(f"a string of more than {MAX_VALUE_CHARS} characters")
    if isinstance(value, list | dict) and len(value) > MAX_ITEMS:
        raise ExprError(f"more than {MAX_ITEMS} items")
    if is_number(value) and isinstance(value, int) and not _INT64[0] <= value <= _INT64[1]:
        raise ExprError("integer overflow")
    return value


def type_name(v: Any) -> str:
    if v is None:
        return "nil"
    return {
        bool: "bool",
        int: "int",
        float: "float64",
        str: "string",
        list: "array",
        dict: "map",
    }.get(type(v), type(v).__name__)


def is_number(v: Any) -> bool:
    return isinstance(v, int | float) and not isinstance(v, bool)


def equal(a: Any, b: Any) -> bool:
    if is_number(a) and is_number(b):
        return bool(a == b)
    if type(a) is not type(b):
        return False
    if isinstance(a, list):
        return len(a) == len(b) and all(equal(x, y) for x, y in zip(a, b, strict=True))
    if isinstance(a, dict):
        return a.keys() == b.keys() and all(equal(a[k], b[k]) for k in a)
    return bool(a == b)


def _want_bool(v: Any, op: str) -> bool:
    if not isinstance(v, bool):
        raise ExprError(f"invalid operation: {op} ({type_name(v)})")
    return v


class Evaluator:
    """One evaluation: ``env`` (nested maps of variables and functions), the regex compiler
    ``matches`` uses, and a step budget."""

    def __init__(
        self,
        env: Mapping[str, Any],
        builtins: Mapping[str, Callable[..., Any]],
        compile_regex: Callable[[str], Any],
    ) -> None:
        self.env = env
        self.builtins = builtins
        self.compile_regex = compile_regex
        self.budget = Budget()
        self.pointer: list[Any] = []

    def run(self, node: Node) -> Any:
        self.budget.spend()
        method = getattr(self, f"_{node.kind}")
        return bounded(method(node))

    def _lit(self, node: Node) -> Any:
        return node.value

    def _id(self, node: Node) -> Any:
        name = node.value
        if name in self.env:
            return self.env[name]
        if name in self.builtins:
            return self.builtins[name]
        # expr-lang compiled against a map environment: an unknown name is nil.
        return None

    def _let(self, node: Node) -> Any:
        value = self.run(node.args[0])
        outer = self.env
        self.env = {**outer, node.value: value}
        try:
            return self.run(node.args[1])
        finally:
            self.env = outer

    def _pointer(self, node: Node) -> Any:
        if not self.pointer:
            raise ExprError("# used outside a predicate")
        return self.pointer[-1]

    def _member(self, node: Node) -> Any:
        obj = self.run(node.args[0])
        key = self.run(node.args[1])
        if obj is None:
            if node.optional:
                return None
            raise ExprError(f"cannot fetch {key!r} from nil")
        return fetch(obj, key)

    def _slice(self, node: Node) -> Any:
        obj, lo, hi = (self.run(a) for a in node.args)
        if not isinstance(obj, list | str):
            raise ExprError(f"cannot slice {type_name(obj)}")
        n = len(obj)
        a = 0 if lo is None else _index(lo, n, clamp=True)
        b = n if hi is None else _index(hi, n, clamp=True)
        return obj[a:b] if a <= b else obj[0:0]

    def _arr(self, node: Node) -> Any:
        return [self.run(a) for a in node.args]

    def _map(self, node: Node) -> Any:
        out: dict[str, Any] = {}
        for k, v in zip(node.args[::2], node.args[1::2], strict=True):
            out[str(self.run(k))] = self.run(v)
        return out

    def _closure(self, node: Node) -> Any:
        raise ExprError("a predicate is only allowed as a builtin's argument")

    def _cond(self, node: Node) -> Any:
        test = _want_bool(self.run(node.args[0]), "?:")
        return self.run(node.args[1] if test else node.args[2])

    def _un(self, node: Node) -> Any:
        v = self.run(node.args[0])
        if node.value == "!":
            return not _want_bool(v, "!")
        if not is_number(v):
            raise ExprError(f"invalid operation: {node.value} ({type_name(v)})")
        return -v if node.value == "-" else v

    def _bin(self, node: Node) -> Any:
        op = node.value
        if op in ("&&", "||"):
            left = _want_bool(self.run(node.args[0]), op)
            if (op == "&&" and not left) or (op == "||" and left):
                return left
            return _want_bool(self.run(node.args[1]), op)
        if op == "??":
            left = self.run(node.args[0])
            return self.run(node.args[1]) if left is None else left
        return binary(op, self.run(node.args[0]), self.run(node.args[1]), self.compile_regex)

    def _call(self, node: Node) -> Any:
        callee, *arg_nodes = node.args
        name = callee.value if callee.kind == "id" else None
        if name in self.builtins and name not in self.env and name is not None:
            fn = self.builtins[name]
        else:
            fn = self.run(callee)
        if not callable(fn):
            raise ExprError(f"{_callee_name(callee)} is not a function")
        if getattr(fn, "predicate", False):
            return self._predicate_call(fn, arg_nodes)
        args = [self.run(a) for a in arg_nodes]
        try:
            return fn(*args)
        except ExprError:
            raise
        except TypeError as exc:
            raise ExprError(f"{_callee_name(callee)}: wrong arguments ({exc})") from None
        except (ValueError, KeyError, IndexError, OverflowError) as exc:
            raise ExprError(f"{_callee_name(callee)}: {exc}") from None

    def _predicate_call(self, fn: Callable[..., Any], arg_nodes: Sequence[Node]) -> Any:
        if len(arg_nodes) == 1 and getattr(fn, "predicate_optional", False):
            # count(array): the elements that are true (builtin.go: count's predicate is
            # optional since expr 1.16).
            return fn(self._items(arg_nodes[0]), lambda element: element)
        if len(arg_nodes) != 2 or arg_nodes[1].kind != "closure":
            raise ExprError("a predicate builtin takes an array and a predicate")
        items = self._items(arg_nodes[0])
        body = arg_nodes[1].args[0]

        def call(element: Any) -> Any:
            self.pointer.append(element)
            try:
                return self.run(body)
            finally:
                self.pointer.pop()

        return fn(items, call)

    def _items(self, node: Node) -> list[Any]:
        items = self.run(node)
        if isinstance(items, dict):
            items = list(items.values())
        if not isinstance(items, list):
            raise ExprError(f"cannot iterate over {type_name(items)}")
        return items


def _callee_name(node: Node) -> str:
    if node.kind == "id":
        return str(node.value)
    if node.kind == "member" and node.args[1].kind == "lit":
        return f"{_callee_name(node.args[0])}.{node.args[1].value}"
    return "expression"


def _index(key: Any, n: int, *, clamp: bool = False) -> int:
    if not isinstance(key, int) or isinstance(key, bool):
        raise ExprError(f"index must be an integer, not {type_name(key)}")
    i = key + n if key < 0 else key
    if clamp:
        return max(0, min(i, n))
    if not 0 <= i < n:
        raise ExprError(f"index out of range: {key} (array of length {n})")
    return i


def fetch(obj: Any, key: Any) -> Any:
    """``obj.key`` / ``obj[key]`` as expr-lang's ``runtime.Fetch``."""
    if isinstance(obj, dict):
        return obj.get(key) if isinstance(key, str) else None
    if isinstance(obj, list | str):
        v = obj[_index(key, len(obj))]
        return v
    raise ExprError(f"cannot fetch {key!r} from {type_name(obj)}")


def _arith(op: str, a: Any, b: Any) -> Any:
    if not (is_number(a) and is_number(b)):
        raise ExprError(f"invalid operation: {type_name(a)} {op} {type_name(b)}")
    if op == "-":
        return a - b
    if op == "*":
        return a * b
    if op == "/":
        if b == 0:
            return float("inf") if a > 0 else float("-inf") if a < 0 else float("nan")
        return float(a) / float(b)
    if op == "%":
        if not (isinstance(a, int) and isinstance(b, int)):
            raise ExprError(f"invalid operation: {type_name(a)} % {type_name(b)}")
        if b == 0:
            raise ExprError("integer divide by zero")
        # Go's % truncates toward zero.
        return a - b * int(a / b)
    if abs(b) > 1024:
        raise ExprError("exponent too large")
    return float(a) ** float(b)


def _compare(op: str, a: Any, b: Any) -> bool:
    if not ((is_number(a) and is_number(b)) or (isinstance(a, str) and isinstance(b, str))):
        raise ExprError(f"invalid operation: {type_name(a)} {op} {type_name(b)}")
    return bool({"<": a < b, ">": a > b, "<=": a <= b, ">=": a >= b}[op])


def binary(op: str, a: Any, b: Any, compile_regex: Callable[[str], Any]) -> Any:
    if op == "==":
        return equal(a, b)
    if op == "!=":
        return not equal(a, b)
    if op in ("<", ">", "<=", ">="):
        return _compare(op, a, b)
    if op == "+":
        if isinstance(a, str) and isinstance(b, str):
            return bounded(a + b)
        if isinstance(a, list) and isinstance(b, list):
            return bounded(a + b)
        if is_number(a) and is_number(b):
            return a + b
        raise ExprError(f"invalid operation: {type_name(a)} + {type_name(b)}")
    if op in ("-", "*", "/", "%", "**"):
        return _arith(op, a, b)
    if op in ("in", "not in"):
        if isinstance(b, dict):
            found = isinstance(a, str) and a in b
        elif isinstance(b, list):
            found = any(equal(a, x) for x in b)
        else:
            raise ExprError(f"invalid operation: {type_name(a)} in {type_name(b)}")
        return found if op == "in" else not found
    if op == "..":
        if not (isinstance(a, int) and isinstance(b, int)):
            raise ExprError("a range needs integers")
        if b - a + 1 > MAX_ITEMS:
            raise ExprError(f"a range of more than {MAX_ITEMS} items")
        return list(range(a, b + 1))
    if not (isinstance(a, str) and isinstance(b, str)):
        raise ExprError(f"invalid operation: {type_name(a)} {op} {type_name(b)}")
    if op == "matches":
        return compile_regex(b).search(a) is not None
    if op == "contains":
        return b in a
    if op == "startsWith":
        return a.startswith(b)
    if op == "endsWith":
        return a.endswith(b)
    raise ExprError(f"unknown operator {op}")
