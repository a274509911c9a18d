"""Shell and Kubernetes variable references, resolved the way the deployment would.

Two syntaxes:

* shell (a script, a ``bash -c`` string): ``$VAR``, ``${VAR}``, ``${VAR:-default}``,
  ``${VAR-default}``, ``${VAR:=default}`` (also assigns), ``${VAR:+alt}``,
  ``${VAR:?message}``; ``$(command)`` and backticks cannot be known statically and
  stay unresolved;
* Kubernetes (a container's ``command``/``args``/``env[].value``): ``$(VAR)``, with
  ``$$`` an escaped ``$`` (kubelet's ``expansion.MappingFuncFor``); a reference to a
  name that is not defined stays as written, exactly as the kubelet leaves it.

A ``Scope`` looks a name up in layers, first match wins: the script's own assignments,
the container's ``env``, the ``env`` argument (``kvcheck --env FILE``), then kvcheck's own
environment. A value that holds references is expanded when used; a name met again
while it is being expanded is a cycle: ``InputError`` (exit 2) naming the variable and
where it was used. A name found nowhere is reported as unresolved, never guessed.
"""

from __future__ import annotations

import contextvars
import os
import posixpath
import re
import threading
from collections.abc import Callable
from contextlib import contextmanager
from dataclasses import dataclass, field

from kvcheck.errors import InputError
from kvcheck.sources.deployments.instance import Location

_NAME = re.compile(r"[A-Za-z_][A-Za-z0-9_]*")
# set by the script reader around one script (kvcheck.sources.deployments.sourcing):
# the helper files' variables and the script's own path
PRELUDE: contextvars.ContextVar[dict | None] = contextvars.ContextVar("kvcheck_prelude", default=None)
SCRIPT_PATH: contextvars.ContextVar[str | None] = contextvars.ContextVar("kvcheck_script_path", default=None)
# Longest text one expansion may produce: real values (paths, flag lists, JSON) are far
# shorter; past it the input is a doubling bomb (A1="$A0$A0", A2="$A1$A1", ...).
MAX_EXPANDED = 1 << 20


def _bounded(text: str, where: Location) -> str:
    if len(text) > MAX_EXPANDED:
        raise InputError(
            f"line {where.line}: a variable expands to more than {MAX_EXPANDED} characters (a self-doubling "
            "definition?)",
            source=where.file,
        )
    return text


_SPECIAL = set("0123456789@*#?$!-")


@dataclass
class VarDef:
    """A variable's raw value, where it was set, and its syntax (``shell``, ``k8s`` or
    ``literal``: never expanded, e.g. kvcheck's own environment; ``runtime``: set, but
    to a value only the platform knows when the pod starts (a Kubernetes downward-API
    ``fieldRef`` such as ``status.podIP``, a ``resourceFieldRef``): every reference to it
    stays unresolved, never read as the literal text ``value``)."""

    value: str
    location: Location | None = None
    syntax: str = "literal"
    # ``partial``: a shell assignment already expanded when it ran (as a shell expands
    # ``X="$X --more"``: in order, never recursively), whose text still holds these
    # references that were unset at that point; they stay unresolved wherever it is used
    missing: tuple = ()
    # set by ``export``/``declare -x``/``set -a`` (a helper script's variables carry it
    # into the scripts read after it, kvcheck.sources.deployments.sourcing)
    exported: bool = False


@dataclass
class Scope:
    """Layers of variables (first match wins) plus cycle tracking; ``assign`` writes the
    first layer (the script's own variables)."""

    layers: list[dict[str, VarDef]] = field(default_factory=list)
    use_os_environ: bool = False
    _active: list[str] = field(default_factory=list)
    # shell arrays (NAME=(...)): name -> the element words (kvcheck.sources.deployments.shell)
    arrays: dict = field(default_factory=dict)
    # the script's path as kvcheck was given it: ``$0`` / ``${BASH_SOURCE[0]}``, so that
    # ``source "$(dirname "$0")/common.sh"`` names a file (kvcheck.sources.deployments.sourcing)
    script: str | None = None
    # names the shell exports (``export VAR``, ``declare -x``, ``set -a`` then ``VAR=v``):
    # the environment of every process it starts after that (``environment``)
    exported: set[str] = field(default_factory=set)
    allexport: bool = False  # ``set -a``: every later assignment is exported

    @classmethod
    def build(
        cls,
        *,
        script: dict[str, VarDef] | None = None,
        container: dict[str, VarDef] | None = None,
        env: dict[str, str] | None = None,
        use_os_environ: bool = False,
    ) -> Scope:
        layers = [
            script if script is not None else {},
            container or {},
            {k: VarDef(v, None, "shell") for k, v in (env or {}).items()},
        ]
        prelude = PRELUDE.get()
        if prelude:
            # variables of the helper scripts given with -f (a 00_common.sh): as if each
            # script sourced them first, so its own assignments win, --env comes after
            layers.insert(2, dict(prelude))
        exported = {n for n, d in (prelude or {}).items() if d.exported}
        return cls(layers=layers, use_os_environ=use_os_environ, script=SCRIPT_PATH.get(), exported=exported)

    def child(self, container: dict[str, VarDef]) -> Scope:
        """A scope for a new process: its own (empty) script layer on top of ``container``
        variables, then this scope's layers. The process's environment is what this shell
        exports plus ``container`` (a ``bash -c`` started with ``VAR=v`` prefixes); a new
        shell exports all of it in turn."""
        return Scope(
            layers=[{}, container, *self.layers],
            use_os_environ=self.use_os_environ,
            arrays=self.arrays,
            script=self.script,
            exported=set(self.exported) | set(container),
        )

    def environment(self, where: Location, unresolved: dict[str, tuple[str, ...]] | None = None) -> dict[str, str]:
        """The environment a process started here gets from the shell (POSIX ``export``:
        the exported variables, with their values at this point; a plain ``VAR=v`` is a
        shell variable only). A value with a reference left unresolved keeps it as
        written (as a ``VAR=v`` prefix word does). Names exported but never set are not in
        it (bash: ``export VAR`` alone marks it; it is passed once it has a value).
        ``unresolved``: when given, each name whose value holds references set nowhere ->
        those references."""
        out: dict[str, str] = {}
        for name in sorted(self.exported):
            missing: list[str] = []
            v = self.lookup(name, where, missing)
            if v is None:
                d = next((layer[name] for layer in self.layers if name in layer), None)
                if d is not None:
                    v = d.value
                    missing.extend(d.missing or re.findall(r"\$\{?([A-Za-z_][A-Za-z0-9_]*)", d.value) or [name])
            if v is not None:
                out[name] = v
                if missing and unresolved is not None:
                    unresolved[name] = tuple(dict.fromkeys(missing))
        return out

    def assign(self, name: str, value: str, location: Location | None) -> None:
        self.layers[0][name] = VarDef(value, location, "literal")

    def lookup(self, name: str, where: Location, missing: list[str] | None = None) -> str | None:
        """The value of ``name`` fully expanded, or None when it is set nowhere (or still
        holds an unresolved reference). Raises ``InputError`` on a cycle.

        ``missing``: when given, a shell assignment made while some of its references
        were unset (``partial``) gives its text, those names appended to ``missing``
        (``CMD="python -m sglang.launch_server --model-path $MODEL"`` stays a launch line
        whose ``--model-path`` is unresolved); without it such a value is None."""
        for layer in self.layers:
            if name in layer:
                d = layer[name]
                if d.syntax == "literal":
                    return d.value
                if d.syntax == "runtime":
                    return None  # known to the platform only: unresolved wherever used
                if d.syntax == "partial":
                    if missing is None:
                        return None
                    missing.extend(d.missing)
                    return d.value
                if name in self._active:
                    chain = " -> ".join([*self._active[self._active.index(name) :], name])
                    at = d.location or where
                    raise InputError(
                        f"variable {name} refers to itself ({chain}), used at line {where.line}; set at {at}",
                        source=where.file,
                    )
                self._active.append(name)
                try:
                    sub: list[str] = []
                    out = expand(d.value, self, d.location or where, sub, syntax=d.syntax)
                finally:
                    self._active.pop()
                return None if sub else out
        if self.use_os_environ and name in os.environ:
            return os.environ[name]
        return None


def _shell_brace(body: str, scope: Scope, where: Location, missing: list[str]) -> str | None:
    """``${...}`` body -> value (None: unresolved, name appended to ``missing``)."""
    m = _NAME.match(body)
    if body.startswith("#") and _NAME.fullmatch(body[1:]):
        v = scope.lookup(body[1:], where)  # a length: only of a fully known value
        if v is None:
            missing.append(body[1:])
            return None
        return str(len(v))
    if not m:
        missing.append(body)
        return None
    name, rest = m.group(0), body[m.end() :]
    if body in ("BASH_SOURCE", "BASH_SOURCE[0]") and scope.script:
        return scope.script
    inner: list[str] = []
    value = scope.lookup(name, where, inner)
    if (
        value is not None
        and inner
        and rest[:2] not in (":-", ":=", ":+", ":?")
        and rest[:1] not in ("-", "=", "+", "?", "")
    ):
        value = None  # ${VAR%pat} of a partly known value: not modelled
    if value is not None:
        missing.extend(inner)
    if not rest:
        if value is None:
            missing.append(name)
        return value
    for op in (":-", ":=", ":+", ":?", "-", "=", "+", "?"):
        if rest.startswith(op):
            word = rest[len(op) :]
            colon = op.startswith(":")
            unset = value is None or (colon and value == "")
            kind = op[-1]
            if kind in "-=":
                if not unset:
                    return value
                sub: list[str] = []
                dv = expand(word, scope, where, sub, syntax="shell")
                if sub:
                    missing.extend(sub)
                    return None
                if kind == "=":
                    scope.assign(name, dv, where)
                return dv
            if kind == "+":
                return "" if unset else expand(word, scope, where, missing, syntax="shell")
            if kind == "?":
                if unset:
                    missing.append(name)
                    return None
                return value
    # other operators (${VAR%pat}, ${VAR/x/y}, ${VAR:0:2}) are not modelled
    missing.append(name)
    return None


def expand(text: str, scope: Scope, where: Location, missing: list[str], *, syntax: str = "shell") -> str:
    """``text`` with every reference it can resolve replaced; unresolved references stay
    as written and their names are appended to ``missing``. ``syntax``: ``shell`` or
    ``k8s`` (``literal`` returns ``text``)."""
    if syntax == "literal" or "$" not in text:
        return text
    with _nested(where):
        if syntax == "envsubst":
            return _envsubst(text, scope, where, missing)
        return _expand(text, scope, where, missing, syntax)


# References nested in references (``${A:-${B:-...}}``, a value naming a variable whose
# value names another...): real inputs nest two or three deep. Bounding the depth keeps
# expansion linear in the input (each level rescans what it holds) and far from Python's
# recursion limit.
MAX_NESTING = 32
_DEPTH = threading.local()


@contextmanager
def _nested(where: Location):
    depth = getattr(_DEPTH, "n", 0) + 1
    if depth > MAX_NESTING:
        raise InputError(
            f"line {where.line}: variable references nested more than {MAX_NESTING} deep (${{A:-${{B:-...}}}}); "
            "kvcheck refuses to expand them",
            source=where.file,
        )
    _DEPTH.n = depth
    try:
        yield
    finally:
        _DEPTH.n = depth - 1


def bracket_end(text: str, start: int, opening: str, closing: str) -> tuple[int, int]:
    """(the index just past the ``closing`` bracket that matches an ``opening`` one before
    ``start``, nesting counted; the depth left open at the end of ``text``, 0 when matched)."""
    depth, j = 1, start
    while j < len(text) and depth:
        if text[j] == opening:
            depth += 1
        elif text[j] == closing:
            depth -= 1
        j += 1
    return j, depth


def _expand(text: str, scope: Scope, where: Location, missing: list[str], syntax: str) -> str:
    out: list[str] = []
    i, n = 0, len(text)
    while i < n:
        c = text[i]
        if c != "$" or i + 1 >= n:
            out.append(c)
            i += 1
            continue
        nxt = text[i + 1]
        if syntax == "k8s":
            if nxt == "$":
                out.append("$")
                i += 2
                continue
            if nxt == "(":
                j = text.find(")", i + 2)
                name = text[i + 2 : j] if j > 0 else ""
                if j > 0 and _NAME.fullmatch(name):
                    v = scope.lookup(name, where, missing)
                    if v is None:
                        missing.append(name)
                        out.append(text[i : j + 1])
                    else:
                        out.append(v)
                    i = j + 1
                    continue
            out.append(c)
            i += 1
            continue
        # shell
        if nxt == "{":
            j, depth = bracket_end(text, i + 2, "{", "}")
            if depth:
                out.append(text[i:])
                break
            v = _shell_brace(text[i + 2 : j - 1], scope, where, missing)
            out.append(text[i:j] if v is None else v)
            i = j
            continue
        if nxt == "(":
            j, _ = bracket_end(text, i + 2, "(", ")")
            inner = text[i + 2 : j - 1]
            path = _path_command(inner, scope, where)
            if path is not None:
                out.append(path)
            else:
                missing.append(f"$({inner})")
                out.append(text[i:j])
            i = j
            continue
        m = _NAME.match(text, i + 1)
        if m:
            v = scope.lookup(m.group(0), where, missing)
            if v is None:
                missing.append(m.group(0))
                out.append(text[i : m.end()])
            else:
                out.append(v)
            i = m.end()
            continue
        if nxt == "0" and scope.script:
            out.append(scope.script)
            i += 2
            continue
        if nxt in _SPECIAL:
            missing.append("$" + nxt)
            out.append(text[i : i + 2])
            i += 2
            continue
        out.append(c)
        i += 1
    return _bounded("".join(out), where)


_DIRNAME = re.compile(r"\s*dirname\s+(?:--\s+)?(.+?)\s*")
_CD_PWD = re.compile(r"\s*cd\s+(?:-P\s+|--\s+)?(.+?)\s*(?:&&|;)\s*pwd(?:\s+-[LP])?\s*")
_REALPATH = re.compile(r"\s*(?:realpath(?:\s+-[sm])?|readlink\s+-[fem])\s+(.+?)\s*")


def _path_command(inner: str, scope: Scope, where: Location) -> str | None:
    """The text of the path idioms scripts use to find their own directory, computed
    as text and never run: ``$(dirname "$0")``, ``$(cd "$(dirname "$0")" && pwd)``,
    ``$(realpath X)`` / ``$(readlink -f X)`` (X as written; kvcheck checks where it
    points when it reads the file). None for any other command (unresolved)."""
    if scope.script is None or len(inner) > 4096:
        return None
    for pattern, op in ((_DIRNAME, "dirname"), (_CD_PWD, "cd"), (_REALPATH, "path")):
        m = pattern.fullmatch(inner)
        if not m:
            continue
        arg = m.group(1)
        if len(arg) >= 2 and arg[0] == arg[-1] and arg[0] in "\"'":
            arg = arg[1:-1]
        if arg[:1] == "'" or any(c in arg for c in ";|&`<>"):
            return None
        miss: list[str] = []
        value = expand(arg, scope, where, miss, syntax="shell")
        if miss or not value:
            return None
        return (posixpath.dirname(value.rstrip("/")) or ".") if op == "dirname" else value
    return None


def _envsubst(text: str, scope: Scope, where: Location, missing: list[str]) -> str:
    """Only ``${NAME}`` / ``${NAME:-default}`` forms (what ``envsubst`` and templating
    steps replace in manifests before ``kubectl apply``); other ``$`` text is left."""
    out: list[str] = []
    i = 0
    while True:
        j = text.find("${", i)
        if j < 0:
            out.append(text[i:])
            break
        k = text.find("}", j)
        if k < 0 or not _NAME.match(text, j + 2):
            out.append(text[i : j + 2])
            i = j + 2
            continue
        out.append(text[i:j])
        v = _shell_brace(text[j + 2 : k], scope, where, missing)
        out.append(text[j : k + 1] if v is None else v)
        i = k + 1
    return _bounded("".join(out), where)


# Downward-API fields a LeaderWorkerSet pod carries, and the variable the LWS controller
# injects with the same value (kubernetes-sigs/lws pkg/utils/pod/pod_utils.go
# ``AddLWSVariables``: LWS_WORKER_INDEX = the ``worker-index`` label, 0 on the leader and
# 1..size-1 on the workers; LWS_GROUP_SIZE = the ``size`` annotation, the group's pods).
_LWS_FIELDS = {
    "metadata.labels['leaderworkerset.sigs.k8s.io/worker-index']": "LWS_WORKER_INDEX",
    "metadata.annotations['leaderworkerset.sigs.k8s.io/size']": "LWS_GROUP_SIZE",
}


def _platform_field(value_from: dict, scope: Scope, where: Location) -> str | None:
    """The value of a ``valueFrom.fieldRef`` the platform sets to a value kvcheck knows for
    this pod (``_LWS_FIELDS``, when the reader injected that pod's LWS variables), else None."""
    ref = value_from.get("fieldRef")
    path = ref.get("fieldPath") if isinstance(ref, dict) else None
    if not isinstance(path, str):
        return None
    key = "".join(path.split()).replace('"', "'")
    var = _LWS_FIELDS.get(key)
    return scope.lookup(var, where) if var else None


def value_from_origin(value_from: object) -> str:
    """Where a ``valueFrom`` takes its value, in words for a finding (a Secret's name and
    key are not shown)."""
    vf = value_from if isinstance(value_from, dict) else {}
    ref = vf.get("fieldRef")
    if isinstance(ref, dict):
        return f"the pod's field {ref.get('fieldPath', '?')} (downward API), known only when the pod starts"
    ref = vf.get("resourceFieldRef")
    if isinstance(ref, dict):
        return f"the container's resource {ref.get('resource', '?')} (downward API), known only when the pod starts"
    ref = vf.get("configMapKeyRef")
    if isinstance(ref, dict):
        return f"key {ref.get('key', '?')} of ConfigMap {ref.get('name', '?')}, which the input does not hold"
    if "secretKeyRef" in vf:
        return "a Secret (secretKeyRef), which kvcheck never reads"
    return "a valueFrom kvcheck cannot read"


def container_env(
    entries: object, file: str, line_of: Callable[[int], int], scope: Scope, origins: dict[str, str] | None = None
) -> tuple[dict[str, VarDef], dict[str, str], list[str]]:
    """A Kubernetes container's ``env`` list -> (variables for lookups, the server's env as
    far as it is known, names whose value comes from ``valueFrom`` and is unknown).
    ``origins``: when given, filled with where each ``valueFrom`` name whose value is not
    known takes it (``value_from_origin``), for the unresolved-variable finding.

    ``value`` entries may reference earlier ones with ``$(VAR)``; ``valueFrom``
    (secrets, config maps, field refs) cannot be read from the manifest: the name stays
    unresolved (in ``unknown``) unless ``--env`` or kvcheck's environment sets it, whose
    value is then the server's too."""
    defs: dict[str, VarDef] = {}
    values: dict[str, str] = {}
    unknown: list[str] = []
    if not isinstance(entries, list):
        return defs, values, unknown
    for i, e in enumerate(entries):
        if not isinstance(e, dict) or not isinstance(e.get("name"), str):
            continue
        name = e["name"]
        loc = Location(file, line_of(i))
        if "value" in e and e["value"] is not None:
            raw = str(e["value"]) if not isinstance(e["value"], bool) else str(e["value"]).lower()
            defs[name] = VarDef(raw, loc, "k8s")
        elif "valueFrom" in e:
            vf = e["valueFrom"] if isinstance(e["valueFrom"], dict) else {}
            if "fieldRef" in vf or "resourceFieldRef" in vf:
                known = _platform_field(vf, scope, loc)
                given = scope.lookup(name, loc) if known is None else None  # --env FILE pins it
                if given is not None:
                    defs[name] = VarDef(given, loc, "literal")
                elif known is not None:
                    # a label/annotation the controller sets to a known value (the LWS
                    # worker index of this pod, the group size)
                    defs[name] = VarDef(known, loc, "literal")
                else:
                    # the pod's own name/IP/namespace, a resource limit...: known when the
                    # pod starts, never as written; a reference to it stays unresolved
                    # ("--host $(POD_IP)" is an address, kvcheck.sources.deployments.addresses)
                    defs[name] = VarDef(f"$({name})", loc, "runtime")
                    if origins is not None:
                        origins[name] = value_from_origin(vf)
            else:
                given = scope.lookup(name, loc)  # --env FILE names its value
                if given is not None:
                    values[name] = given
                else:
                    unknown.append(name)
                    if origins is not None:
                        origins[name] = value_from_origin(vf)
    local = scope.child(defs)
    for name, d in defs.items():
        miss: list[str] = []
        values[name] = expand(d.value, local, d.location or Location(file), miss, syntax="k8s")
    return defs, values, unknown
