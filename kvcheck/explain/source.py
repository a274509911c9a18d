"""Check catalog templates against the installed SGLang's own source text.

The runtime's messages are f-strings, %-style log formats and plain literals inside
its functions. ``function_literals`` reads a function's source (``inspect.getsource``),
and renders every string expression in it with ``{}`` for each interpolated part, so a
catalog template (with its field names also turned into ``{}``) can be compared with the
literal the runtime formats. Imports SGLang only when asked to.
"""

from __future__ import annotations

import ast
import importlib
import importlib.util
import inspect
import re
import textwrap
from typing import Any

from kvcheck.explain.catalog import Entry

_FIELD = re.compile(r"\{\w*\}")
_PERCENT = re.compile(r"%[-#+ 0]*\d*(?:\.\d+)?[sdrxfig]")


def normalize(template: str) -> str:
    """``template`` with every ``{name}`` and %-conversion written as ``{}``."""
    return _PERCENT.sub("{}", _FIELD.sub("{}", template))


def _render(node: ast.AST) -> str | None:
    if isinstance(node, ast.Constant) and isinstance(node.value, str):
        return node.value
    if isinstance(node, ast.JoinedStr):
        out = []
        for v in node.values:
            if isinstance(v, ast.Constant):
                out.append(str(v.value))
            else:
                out.append("{}")
        return "".join(out)
    if isinstance(node, ast.BinOp) and isinstance(node.op, ast.Add):
        left, right = _render(node.left), _render(node.right)
        if left is None and right is None:
            return None
        return (left if left is not None else "{}") + (right if right is not None else "{}")
    return None


def resolve(module: str, qualname: str) -> Any:
    """The object ``module.qualname`` (a function or method) of the installed runtime."""
    obj: Any = importlib.import_module(module)
    for part in qualname.split("."):
        obj = getattr(obj, part)
    return inspect.unwrap(obj)


def function_literals(obj: Any) -> set[str]:
    """Every string expression in ``obj``'s source, normalized (see ``normalize``)."""
    return _literals_of_tree(ast.parse(textwrap.dedent(inspect.getsource(obj))))


def _literals_of_tree(tree: ast.AST) -> set[str]:
    found: set[str] = set()
    for node in ast.walk(tree):
        text = _render(node)
        if text is not None:
            found.add(normalize(text))
    return found


def source_literals(module: str, qualname: str) -> set[str]:
    """The normalized string literals of ``module.qualname`` in the installed runtime.

    Imports the module when it can (``inspect.getsource`` of the real function); when
    the module's own imports fail on this machine (optional serving dependencies), it
    reads the installed ``.py`` file and finds the function by its qualified name.
    """
    try:
        return function_literals(resolve(module, qualname))
    except ImportError:
        pass
    spec = importlib.util.find_spec(module)
    if spec is None or not spec.origin:
        raise LookupError(f"module {module} is not installed")
    with open(spec.origin, encoding="utf-8") as fh:
        tree: ast.AST = ast.parse(fh.read())
    for part in qualname.split("."):
        body = getattr(tree, "body", [])
        match = [
            n for n in body if isinstance(n, (ast.ClassDef, ast.FunctionDef, ast.AsyncFunctionDef)) and n.name == part
        ]
        if not match:
            raise LookupError(f"{qualname} not found in {spec.origin}")
        tree = match[0]
    return _literals_of_tree(tree)


def entry_problems(entry: Entry) -> list[str]:
    """Why ``entry``'s template does not match the literal in its runtime source(s);
    empty when every SGLang source holds it. NIXL-side sources are not checked here."""
    problems = []
    for src in entry.sources:
        if src.project:
            continue
        if not src.module or not src.qualname:
            problems.append(f"{entry.id}: a source names neither a project nor a module and qualname")
            continue
        try:
            literals = source_literals(src.module, src.qualname)
        except (ImportError, AttributeError, LookupError) as exc:
            problems.append(f"{entry.id}: cannot resolve {src.module}:{src.qualname}: {exc}")
            continue
        want = normalize(src.template or entry.template)
        if not any(want in lit for lit in literals):
            near = sorted(literals, key=lambda s: -_overlap(s, want))[:1]
            problems.append(f"{entry.id}: {src.module}:{src.qualname} has no literal {want!r}; nearest {near!r}")
    return problems


def _overlap(a: str, b: str) -> int:
    return len(set(a.split()) & set(b.split()))
