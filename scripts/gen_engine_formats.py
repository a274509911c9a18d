#!/usr/bin/env python3
"""The message formats of the engines and libraries next to SGLang, for ``kvcheck explain``.

SGLang's own formats are ``scripts/gen_explain_formats.py``'s. A pasted log also holds the
lines of vLLM (its KV connectors and engine), of NIXL, of UCX and of Mooncake's transfer
engine and store. Each project's log statements are read from its own source, release by
release, so that such a line is recognized *whole* (all its literal text, in order) and
said to be that project's, with the file and function that print it:

- Python (vLLM, NIXL's ``_api.py``, LMCache): ``raise T(msg)``, ``assert c, msg``,
  ``logger.<level>(msg, *args)`` (the syntax-tree reader of ``gen_explain_formats.py``);
- NIXL (C++): ``NIXL_ERROR/NIXL_WARN/NIXL_INFO/NIXL_FATAL/NIXL_PERROR << a << b``, and
  ``NIXL_ERROR_FUNC`` which prints the function's name and ``": "`` first;
- Mooncake (C++, glog): ``LOG(ERROR|WARNING|INFO|FATAL) << ...``, ``PLOG(...)`` (glog appends
  ``": <strerror> [errno]"``), ``LOG_IF``/``LOG_FIRST_N``/``LOG_EVERY_N``;
- libfabric (C): ``FI_WARN/FI_INFO(prov, subsys, fmt, ...)``, ``EFA_WARN/EFA_INFO(subsys, fmt, ...)``
  and ``fprintf(stderr, fmt, ...)``;
- UCX (C): ``ucs_error/ucs_warn/ucs_diag/ucs_fatal/ucs_info/ucs_log_fatal_error(fmt, ...)``
  and ``fprintf(stderr, fmt, ...)`` (printf: each conversion, and each format macro between
  literals, is a field).

A stream's string literals are its literal text; every other operand is a field named
after its last identifier. Debug/trace levels are left out. Messages with little literal
text (under 14 characters or 2 words) are left out.

Written to ``kvcheck/explain/engine_formats.json.gz`` (gzip, no time stamp)::

    {"engines": {"nixl": {"releases": [...], "modules": [...], "kinds": [...],
                          "formats": [[p, f, k, m, q, l, r, t], ...]}, ...}}

with the rows of ``formats.json.gz`` (``m``: the source file path in the project), and
``"codes": {NAME: [value, meaning]}`` where a project documents its status codes (Mooncake's
``ErrorCode`` and ``ERR_*``, UCX's ``ucs_status_string`` texts).

Sources: ``--py NAME=DIR:PKG`` (``DIR/<version>/PKG/...``: wheels unpacked, ``pip download
--no-deps vllm==X``; vLLM and LMCache), ``--git NAME=REPO[:TAG_RE]`` (a git directory of the project, e.g.
from ``git clone --bare``; the release tags matching ``TAG_RE`` are read, and the head as
``main@<date>``: messages not in a release yet).

Usage: python scripts/gen_engine_formats.py --py vllm=/tmp/vllmsrc:vllm --py lmcache=/tmp/lmcachesrc:lmcache \\
    --git vllm-ascend=/path/vllm-ascend.git \\
    --git nixl=/path/nixl.git --git ucx=/path/ucx.git --git mooncake=/path/Mooncake.git
"""

from __future__ import annotations

import argparse
import ast
import gzip
import json
import re
import subprocess
import sys
from collections.abc import Iterator
from pathlib import Path

REPO = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(REPO / "scripts"))
sys.path.insert(0, str(REPO))

import gen_explain_formats as pyfmt  # noqa: E402

OUT = REPO / "kvcheck" / "explain" / "engine_formats.json.gz"

# which files of each project are read, and which release tags
PROJECTS = {
    "nixl": {
        "tags": r"^v?(?:0\.[2-9]|0\.1\d|1\.\d+)\.\d+$",
        "files": r"^src/.*\.(?:cpp|cc|h|hpp|py)$",
        "skip": r"/test|/bench|/examples?/",
    },
    "mooncake": {
        "tags": r"^v0\.3\.(?:[0-9]|1\d)(?:\.post\d+)?$",
        "files": r"^mooncake-(?:transfer-engine|store|integration|common|p2p-store)/.*\.(?:cpp|cc|h|hpp|py)$",
        "skip": r"/tests?/|/example|/benchmark|_test\.|/tools/|/nvlink-allocator/",
    },
    "vllm-ascend": {
        # the final releases and the release candidates of releases never made final
        "tags": r"^v0\.(?:9\.1|10\.2rc1|11\.0|12\.0rc1|13\.0|14\.0rc1|15\.0rc1|16\.0rc1|17\.0rc1|18\.0"
        r"|19\.1rc1|20\.2rc1|21\.0rc1|22\.1rc1|23\.0|24\.0rc1|25\.1rc1)$",
        "files": r"^vllm_ascend/.*\.py$",
        "skip": r"/tests?/|/benchmarks?/",
    },
    "libfabric": {
        "tags": r"^v(?:1\.(?:18|20|22)|2\.[0246])\.0$",
        "files": r"^(?:prov/(?:efa|verbs|rxm|util|shm|hook)|src)/.*\.(?:c|h)$",
        "skip": r"/test|/fabtests?/",
    },
    "ucx": {
        "tags": r"^v1\.(?:[89]|1\d|2\d)\.\d+$",
        "files": r"^src/(?:ucs|uct|ucp|ucm)/.*\.(?:c|h|inl)$",
        "skip": r"/test",
    },
}
# Python packages unpacked from their wheels: every module but models' own code and tests
PY_SKIP = re.compile(r"/model_executor/models/|/tests?/|/benchmarks?/|/third_party/|/vllm_flash_attn/")


def _vkey(v: str) -> tuple:
    nums = [int(x) for x in re.findall(r"\d+", v)]
    return tuple(nums) + (0,) * (6 - len(nums))


# ---------------------------------------------------------------------- C/C++ reading
_TOKEN = re.compile(
    r"""(?P<ws>\s+)|(?P<com>//[^\n]*|/\*.*?\*/)|(?P<pp>^[ \t]*\#[^\n]*(?:\\\n[^\n]*)*)
    |(?P<raw>(?:u8|[uUL])?R"(?P<d>[^(\s]{0,16})\((?P<rawbody>.*?)\)(?P=d)")
    |(?P<str>(?:u8|[uUL])?"(?:\\.|[^"\\\n])*")|(?P<chr>'(?:\\.|[^'\\\n])+')
    |(?P<id>[A-Za-z_]\w*)|(?P<num>\d[\w.]*)|(?P<op><<|::|->|[^\s\w])""",
    re.S | re.M | re.X,
)
_ESC = {"n": "\n", "t": "\t", '"': '"', "'": "'", "\\": "\\", "0": "", "r": ""}


def _unquote(s: str) -> str:
    body = s[s.index('"') + 1 : -1]
    return re.sub(r"\\(.)", lambda m: _ESC.get(m.group(1), m.group(1)), body)


def c_tokens(text: str) -> list[tuple[str, str, int]]:
    """(kind, text, line) of a C/C++ file; comments dropped; a preprocessor directive
    is kept as one ``pp`` token unless it is a ``#define`` (whose body is read: macros
    log too)."""
    out: list[tuple[str, str, int]] = []
    line = 1
    pos = 0
    n = len(text)
    while pos < n:
        m = _TOKEN.match(text, pos)
        if m is None:
            pos += 1
            continue
        kind = m.lastgroup or ""
        tok = m.group(0)
        if kind == "pp":
            d = re.match(r"[ \t]*#\s*define\s+\w+(?:\([^)]*\))?", tok)
            if d is not None:
                # a macro body: read on (its line continuations are blanks)
                body = tok[d.end() :].replace("\\\n", " \n")
                out.extend((k, t, ln + line) for k, t, ln in c_tokens(body) if k != "pp")
                out.append(("op", ";", line))
        elif kind == "raw":
            out.append(("str", '"' + m.group("rawbody").replace("\\", "\\\\").replace('"', '\\"') + '"', line))
        elif kind in ("str", "chr", "id", "num", "op"):
            out.append((kind if kind != "chr" else "num", tok, line))
        line += tok.count("\n")
        pos = m.end()
    return out


_CONTROL = {"if", "for", "while", "switch", "catch", "return", "sizeof", "do", "else", "decltype", "alignof"}
_SCOPE_WORDS = {"namespace", "class", "struct", "union", "enum", "extern"}


class _Scopes:
    """The function a token sits in (``Class::name`` where the definition says)."""

    def __init__(self) -> None:
        self.stack: list[str | None] = []  # per open brace: a function name, or None
        self.since: list[tuple[str, str, int]] = []  # tokens since the last ; { }

    def feed(self, tok: tuple[str, str, int]) -> None:
        kind, t, _ = tok
        if t == "{":
            self.stack.append(self._function())
            self.since = []
        elif t == "}":
            if self.stack:
                self.stack.pop()
            self.since = []
        elif t == ";":
            self.since = []
        elif len(self.since) < 200:
            self.since.append(tok)

    def _function(self) -> str | None:
        toks = [t for _, t, _ in self.since]
        if not toks or any(t in _SCOPE_WORDS for t in toks[:3]) or toks[0] in _CONTROL or "=" in toks[:1]:
            return None
        if "(" not in toks:
            return None
        i = toks.index("(")
        if i == 0 or toks[i - 1] in _CONTROL or not re.match(r"[A-Za-z_~]", toks[i - 1]) or "]" in toks[:i]:
            return None
        if "=" in toks[:i]:
            return None
        name = toks[i - 1]
        j = i - 1
        while j >= 2 and toks[j - 1] == "::" and re.match(r"\w", toks[j - 2]):
            name = toks[j - 2] + "::" + name
            j -= 2
        return name

    def current(self) -> str:
        for f in reversed(self.stack):
            if f:
                return f
        return ""


def _operand(toks: list[tuple[str, str, int]], msg: pyfmt._Msg, consts: dict[str, str] | None = None) -> None:
    """One ``<<`` operand: string literals are text, a variable the function set from
    literals alone (``consts``) its text, anything else a field named after its last
    identifier."""
    if toks and all(k == "str" for k, _, _ in toks):
        msg.lit("".join(_unquote(t) for _, t, _ in toks))
        return
    if consts and len(toks) == 1 and toks[0][1] in consts:
        msg.lit(consts[toks[0][1]])
        return
    ids = [t for k, t, _ in toks if k == "id" and t not in ("std", "c_str", "str", "what", "data", "get", "size")]
    if [t for _, t, _ in toks] in (["std", "::", "endl"], ["endl"]):
        return
    msg.field(ids[-1] if ids else "value")


def _split(toks: list[tuple[str, str, int]], sep: str) -> list[list[tuple[str, str, int]]]:
    out: list[list[tuple[str, str, int]]] = [[]]
    depth = 0
    for tok in toks:
        t = tok[1]
        if t in "([{":
            depth += 1
        elif t in ")]}":
            depth -= 1
        if t == sep and depth == 0:
            out.append([])
        else:
            out[-1].append(tok)
    return out


def _stream(
    toks: list[tuple[str, str, int]], start: int, consts: dict[str, str] | None = None
) -> tuple[pyfmt._Msg, int]:
    """The ``<<`` chain from ``start`` (just after the macro) to the statement's end."""
    depth = 0
    j = start
    while j < len(toks):
        t = toks[j][1]
        if t in "([{":
            depth += 1
        elif t in ")]}":
            if depth == 0:
                break
            depth -= 1
        elif t == ";" and depth == 0:
            break
        j += 1
    body = toks[start:j]
    msg = pyfmt._Msg()
    for op in _split(body, "<<")[1:]:
        if op:
            _operand(op, msg, consts)
    return msg, j


_CONV = re.compile(r"%(?:[-+ #0]*(?:\d+|\*)?(?:\.(?:\d+|\*))?(?:hh|h|ll|l|L|z|j|t)?[sdiuxXfFeEgGcpom%]|%)")


def _printf(toks: list[tuple[str, str, int]]) -> pyfmt._Msg | None:
    """A printf call's format (its first argument: literals and format macros such as
    ``UCS_PTR_FMT`` / ``PRIu64``) as literals and fields."""
    args = _split(toks, ",")
    if not args or not args[0]:
        return None
    fmt = args[0]
    if not any(k == "str" for k, _, _ in fmt):
        return None
    msg = pyfmt._Msg()
    names = [[t for k, t, _ in a if k == "id"] for a in args[1:]]
    k = 0
    for kind, t, _ in fmt:
        if kind != "str":
            if kind == "id" and t.startswith(("PRI", "SCN")):
                # ``"%" PRIx64``: the conversion's start is in the literal before the macro
                msg.parts[-1] = re.sub(r"%[-+ #0]*\d*(?:\.\d+)?$", "", msg.parts[-1])
                k += 1
            msg.field(t.lower() if kind == "id" else "value")
            continue
        s = _unquote(t)
        pos = 0
        for m in _CONV.finditer(s):
            msg.lit(s[pos : m.start()])
            if m.group(0) == "%%":
                msg.lit("%")
            else:
                nm = names[k][-1] if k < len(names) and names[k] else "value"
                msg.field(nm)
                k += 1 + m.group(0).count("*")
            pos = m.end()
        msg.lit(s[pos:])
    return msg


_NIXL_MACROS = {
    "NIXL_ERROR": "error",
    "NIXL_PERROR": "error",
    "NIXL_ERROR_FUNC": "error",
    "NIXL_WARN": "warning",
    "NIXL_PWARN": "warning",
    "NIXL_INFO": "info",
    "NIXL_PINFO": "info",
    "NIXL_FATAL": "fatal",
    "NIXL_PFATAL": "fatal",
}
# libfabric's logging macros: the format is the first argument that is a string
_FI_MACROS = {
    "FI_WARN": "warning",
    "FI_WARN_ONCE": "warning",
    "EFA_WARN": "warning",
    "EFA_WARN_ONCE": "warning",
    "FI_INFO": "info",
    "EFA_INFO": "info",
    "VRB_WARN": "warning",
    "VERBS_WARN": "warning",
}
_GLOG_LEVELS = {"ERROR": "error", "WARNING": "warning", "INFO": "info", "FATAL": "fatal"}
_UCS_FUNCS = {
    "ucs_error": "error",
    "ucs_warn": "warning",
    "ucs_diag": "diag",
    "ucs_fatal": "fatal",
    "ucs_info": "info",
    "ucs_log_fatal_error": "fatal",
    "ucs_print": "print",
    "fprintf": "error",
}


def _closing_paren(toks: list[tuple[str, str, int]], start: int) -> int:
    """Index of the ``)`` that closes the ``(`` at ``toks[start]`` (``len(toks)`` when none does)."""
    depth, j, n = 0, start, len(toks)
    while j < n:
        if toks[j][1] == "(":
            depth += 1
        elif toks[j][1] == ")":
            depth -= 1
            if depth == 0:
                break
        j += 1
    return j


def scan_c(text: str) -> Iterator[tuple[str, pyfmt._Msg, str, int]]:
    """(kind, message, function, line) of every log statement of a C/C++ file."""
    toks = c_tokens(text)
    scopes = _Scopes()
    consts: dict[str, str] = {}  # string variables set from literals alone (``std::string m = "...";``)
    consts_of = ""
    i = 0
    n = len(toks)
    while i < n:
        kind, t, line = toks[i]
        if scopes.current() != consts_of:
            consts, consts_of = {}, scopes.current()
        if kind == "id" and i + 2 < n and toks[i + 1][1] == "=" and toks[i + 2][0] == "str":
            j = i + 2
            while j < n and toks[j][0] == "str":
                j += 1
            if j < n and toks[j][1] == ";":
                consts[t] = "".join(_unquote(x) for _, x, _ in toks[i + 2 : j])
        if kind == "id":
            nxt = toks[i + 1][1] if i + 1 < n else ""
            got: tuple[str, pyfmt._Msg] | None = None
            end = i + 1
            if t in _NIXL_MACROS and nxt in ("<<", "."):
                j = i + 1
                if nxt == ".":  # NIXL_ERROR.WithPerror()
                    while j < n and toks[j][1] != "<<" and toks[j][1] != ";":
                        j += 1
                    j -= 1
                msg, end = _stream(toks, j, consts)
                if t == "NIXL_ERROR_FUNC":
                    fn = scopes.current().split("::")[-1]
                    head = pyfmt._Msg()
                    if fn:
                        head.lit(fn + ": ")
                    else:
                        head.field("function")
                        head.lit(": ")
                    head.extend(msg)
                    msg = head
                if t.startswith("NIXL_P"):
                    msg.lit(": ")
                    msg.field("strerror")
                got = (f"log:{_NIXL_MACROS[t]}", msg)
            elif t in ("LOG", "PLOG", "LOG_IF", "PLOG_IF", "LOG_FIRST_N", "LOG_EVERY_N", "LOG_EVERY_T") and nxt == "(":
                lvl = toks[i + 2][1] if i + 2 < n else ""
                j = _closing_paren(toks, i + 1)  # the closing parenthesis of LOG(...)
                if lvl in _GLOG_LEVELS and j + 1 < n and toks[j + 1][1] == "<<":
                    msg, end = _stream(toks, j + 1, consts)
                    if t.startswith("PLOG"):
                        msg.lit(": ")
                        msg.field("strerror")
                        msg.lit(" [")
                        msg.field("errno")
                        msg.lit("]")
                    got = (f"log:{_GLOG_LEVELS[lvl]}", msg)
            elif (t in _UCS_FUNCS or t in _FI_MACROS) and nxt == "(":
                j = _closing_paren(toks, i + 1)
                args = toks[i + 2 : j]
                level = _UCS_FUNCS.get(t) or _FI_MACROS[t]
                if t in _FI_MACROS:  # FI_WARN(prov, subsys, fmt, ...) / EFA_WARN(subsys, fmt, ...)
                    parts = _split(args, ",")
                    k0 = next((k for k, a in enumerate(parts) if any(kk == "str" for kk, _, _ in a)), None)
                    args = [tok for a in parts[k0:] for tok in [*a, ("op", ",", 0)]][:-1] if k0 is not None else []
                if t == "fprintf":  # a message to stderr (printed before the log is set up)
                    if not args or args[0][1] != "stderr":
                        args = []
                    else:
                        args = args[2:]  # past ``stderr ,``
                        level = "error"
                pm = _printf(args) if args else None
                if pm is not None:
                    got = (f"log:{level}", pm)
                end = i + 1
            if got is not None:
                yield got[0], got[1], scopes.current(), line
                if end > i + 1:
                    for tok in toks[i:end]:
                        scopes.feed(tok)
                    i = end
                    continue
        scopes.feed(toks[i])
        i += 1


# ---------------------------------------------------------------------- projects


def scan_files(files: Iterator[tuple[str, str]]) -> dict[tuple, tuple[str, str, int]]:
    """{(kind, parts, fields): (path, function, line)} of one release's files."""
    out: dict[tuple, tuple[str, str, int]] = {}
    for path, text in files:
        if path.endswith(".py"):
            try:
                tree = ast.parse(text)
            except (SyntaxError, ValueError):
                continue
            v = pyfmt._Visitor()
            v.visit(tree)
            found: list[tuple[str, pyfmt._Msg, str, int]] = v.found
        else:
            found = list(scan_c(text))
        for kind, msg, qual, line in found:
            got = pyfmt._clean(msg)
            if got is None:
                continue
            parts, fields = got
            out.setdefault((kind, tuple(parts), tuple(fields)), (path, qual, line))
    return out


def _git(repo: str, *args: str) -> str:
    return subprocess.run(["git", "-C", repo, *args], check=True, capture_output=True, text=True).stdout


def git_release_files(repo: str, tag: str, files_re: str, skip_re: str) -> Iterator[tuple[str, str]]:
    if tag.startswith("main@"):
        tag = "HEAD"
    names = [
        p
        for p in _git(repo, "ls-tree", "-r", "--name-only", tag).splitlines()
        if re.search(files_re, p) and not re.search(skip_re, p)
    ]
    if not names:
        return
    proc = subprocess.run(
        ["git", "-C", repo, "cat-file", "--batch"],
        input="".join(f"{tag}:{p}\n" for p in names).encode(),
        capture_output=True,
        check=True,
    )
    data = proc.stdout
    pos = 0
    for p in names:
        head_end = data.index(b"\n", pos)
        head = data[pos:head_end].split()
        if len(head) < 3 or head[1] != b"blob":
            pos = head_end + 1
            continue
        size = int(head[2])
        body = data[head_end + 1 : head_end + 1 + size]
        pos = head_end + 1 + size + 1
        yield p, body.decode("utf-8", errors="replace")


def wheel_release_files(root: Path, pkg: str) -> Iterator[tuple[str, str]]:
    for p in sorted((root / pkg).rglob("*.py")):
        rel = p.relative_to(root).as_posix()
        if PY_SKIP.search("/" + rel):
            continue
        yield rel, p.read_text("utf-8", errors="replace")


def _ranges(idx: list[int]) -> list[list[int]]:
    return pyfmt._ranges(idx)


def build_engine(releases: list[str], files_of) -> dict:
    from kvcheck.explain.formats import token

    seen: dict[tuple, dict] = {}
    for ri, v in enumerate(releases):
        found = scan_files(files_of(v))
        print(f"  {v}: {len(found)} formats", file=sys.stderr)
        for key, loc in found.items():
            e = seen.setdefault(key, {"r": [], "loc": loc})
            e["r"].append(ri)
            e["loc"] = loc
    modules: dict[str, int] = {}
    kinds: dict[str, int] = {}
    formats = []
    for (kind, parts, fields), e in seen.items():
        path, qual, line = e["loc"]
        mi = modules.setdefault(path, len(modules))
        ki = kinds.setdefault(kind, len(kinds))
        formats.append([list(parts), list(fields), ki, mi, qual, line, _ranges(e["r"]), token(list(parts))])
    formats.sort(key=lambda f: (f[3], f[5], f[0]))
    return {"releases": releases, "modules": list(modules), "kinds": list(kinds), "formats": formats}


# status codes with their documented meaning: (project, file at the head, regex of one code)
CODES = {
    "mooncake": [
        # enum class ErrorCode (the store): ``NAME = -200,  ///< meaning``
        ("mooncake-store/include/types.h", r"\b([A-Z][A-Z0-9_]+)\s*=\s*(-?\d+),?\s*///<\s*([^\n]+)"),
        # the transfer engine's ``#define ERR_NAME (-n)``
        ("mooncake-transfer-engine/include/error.h", r"#define\s+(ERR_[A-Z0-9_]+)\s+\((-?\d+)\)()"),
    ],
    "ucx": [
        # ucs_status_string(): ``case UCS_ERR_X: return "text";``
        ("src/ucs/type/status.c", r"case\s+(UCS_[A-Z0-9_]+):\s*return\s+\"([^\"]+)\";()"),
    ],
}


def read_codes(name: str, repo: str) -> dict[str, list]:
    """{code name: [value or status text, meaning]} of a project's status codes (its head)."""
    out: dict[str, list] = {}
    for path, rx in CODES.get(name, []):
        try:
            text = _git(repo, "show", f"HEAD:{path}")
        except subprocess.CalledProcessError:
            continue
        for m in re.finditer(rx, text):
            code, val, meaning = m.group(1), m.group(2), m.group(3).strip()
            out.setdefault(code, [val, meaning])
    return out


def main(argv: list[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--py", action="append", default=[], help="NAME=DIR:PKG (DIR/<version>/PKG/...: wheels unpacked)")
    ap.add_argument("--git", action="append", default=[], help="NAME=GITDIR[:TAG_RE]")
    ap.add_argument("--out", type=Path, default=OUT)
    args = ap.parse_args(argv)
    engines: dict[str, dict] = {}
    for spec in args.py:
        name, _, rest = spec.partition("=")
        root_s, _, pkg = rest.rpartition(":")
        root = Path(root_s)
        rels = sorted((d.name for d in root.iterdir() if (d / pkg).is_dir()), key=_vkey)
        print(name, rels, file=sys.stderr)

        def py_files(v: str, root: Path = root, pkg: str = pkg) -> Iterator[tuple[str, str]]:
            return wheel_release_files(root / v, pkg)

        engines[name] = build_engine(rels, py_files)
    for spec in args.git:
        name, _, rest = spec.partition("=")
        repo, _, tag_re = rest.partition(":")
        proj = PROJECTS[name]
        tag_re = tag_re or proj["tags"]
        tags = sorted((t for t in _git(repo, "tag").split() if re.match(tag_re, t)), key=_vkey)
        # the development head after the newest tag: messages not yet released
        day = _git(repo, "log", "-1", "--format=%cs", "HEAD").strip()
        tags.append(f"main@{day}")
        print(name, tags, file=sys.stderr)

        def files_of(tag: str, repo: str = repo, proj: dict = proj) -> Iterator[tuple[str, str]]:
            return git_release_files(repo, tag, proj["files"], proj["skip"])

        engines[name] = build_engine(tags, files_of)
        codes = read_codes(name, repo)
        if codes:
            engines[name]["codes"] = codes
    data = {"generated_by": "scripts/gen_engine_formats.py", "engines": engines}
    text = json.dumps(data, separators=(",", ":"), ensure_ascii=False) + "\n"
    args.out.write_bytes(gzip.compress(text.encode("utf-8"), compresslevel=9, mtime=0))
    total = sum(len(e["formats"]) for e in engines.values())
    print(f"{total} formats -> {args.out} ({args.out.stat().st_size} bytes)", file=sys.stderr)
    return 0


if __name__ == "__main__":
    sys.exit(main())
