"""The SGLang release a log shows, and the evidence for it.

A log rarely says "SGLang 0.5.16" in so many words; it shows it in other ways, each read
here with the line it came from:

- a version line: ``sglang: 0.5.0rc0`` (``python -m sglang.check_env``),
  ``sglang==0.5.10``, ``SGLang v0.5.16``, ``"version": "0.5.8"``;
- an image tag: ``lmsysorg/sglang:v0.5.16-cu130`` (any ``.../sglang...:vX.Y.Z`` tag);
- an install path: ``sgl-venv-0.5.11/lib/...``, ``sglang-deepep-venv-0.5.3/lib/...``, ``sglang-0.5.11.dist-info``,
  ``/sglang_0.4.7_dea8aa7/``;
- a development build: ``0.0.0.dev1+g22c08a9be``, ``nightly-dev-20260713`` (not a
  release: said so, never mapped to one);
- a server-args dump: ``server_args=ServerArgs(model_path=..., ...)``: the releases whose
  ``ServerArgs`` has every field the dump names (``release_index.json``);
- traceback frames through ``sglang/srt/...``: the releases where the named function
  spans that line of that file (``release_index.json``, built from each release's source
  by ``scripts/gen_explain_release_index.py``, 0.5.5 on) and, where the source line is
  pasted under the frame, the releases whose file has that text at that line
  (``linedigests``, 0.5.1 on). The text wins over the line number.

Explicit versions win; otherwise the intersection of the dump's and the frames'
candidates is reported as a range, and a single release only when exactly one fits. A
stated release whose code does not have the traceback's pasted lines is kept, and the
releases that have them are said with it (``LogRelease.disagree``).
"""

from __future__ import annotations

import functools
import json
import re
from importlib import resources
from typing import Any

from pydantic import BaseModel, Field

from kvcheck.explain import linedigests

_V = r"(\d+\.\d+\.\d+(?:rc\d+)?(?:\.post\d+)?)"
EXPLICIT = [
    # an image reference: the name's last path part holds "sglang", then ":TAG"; read from
    # the reference's start, each part taken once (no backtracking: a line of 8000
    # characters of "sglang_" repeats cost one pass, not minutes)
    (
        "image tag",
        re.compile(r"(?<![\w./-])(?>(?:[\w./-]*/)?)(?>[\w.-]*?sglang)[\w.-]*+:v?" + _V + r"(?:(?![\w.])|-)"),
    ),
    ("version line", re.compile(r"^\s*sglang(?:\[[\w,-]+\])?\s*[:=]=?\s*" + _V + r"\b", re.I)),
    # pip list: the package and its version in columns
    ("pip list", re.compile(r"^\s*sglang(?:\[[\w,-]+\])?\s{2,}" + _V + r"(?:\s|$)")),
    # a wheel or sdist name, and pip's summary of what it installed
    (
        "wheel",
        re.compile(
            r"\bsglang-" + _V + r"-(?:py3|cp3)[\w.-]*\.whl\b|\bsglang-" + _V + r"\.tar\.gz\b"
            r"|\bSuccessfully installed\b.*?\bsglang-" + _V + r"(?![\w.])"
        ),
    ),
    (
        "version line",
        re.compile(
            r"\bsglang(?:\[[\w,-]+\])?=="
            + _V
            + r"\b|\bSGLang v"
            + _V
            + r"\b|\bSGLang version:? v?"
            + _V
            + r"\b|\bsglang version:? v?"
            + _V
            + r"\b"
        ),
    ),
    (
        "install path",
        re.compile(
            r"\bsgl(?:ang)?[-_](?:(?!venv[-_])[A-Za-z0-9]+[-_])*+venv[-_]"
            + _V
            + r"/|\bsglang-"
            + _V
            + r"\.dist-info\b|/sglang[_-]"
            + _V
            + r"[_/]"
        ),
    ),
    ("version field", re.compile(r"[\"']version[\"']\s*:\s*[\"']" + _V + r"[\"']")),
]
DEV_BUILD = re.compile(r"\b0\.0\.0\.dev\d+\+g([0-9a-f]{7,})\b|\bsglang[\w.-]*+:(?:nightly|dev)[\w.-]*\b")
SERVER_ARGS = re.compile(r"server_args=ServerArgs\((?P<body>.*)")
FIELD = re.compile(r"(?:^|, )([a-z_][a-z0-9_]*)=")
_EXC_LINE = re.compile(r"^(?:[\w]+\.)*[A-Za-z]\w*(?:Error|Exception|Exit|Interrupt)(?::|$)")
FRAME = re.compile(
    r'File "(?P<path>(?:[^"]*?/)?sglang/(?P<file>srt/[\w/]+\.py))", line (?P<line>\d+),? in (?P<func>\w+)'
)


_HINT = re.compile(r"sglang|SGLang|SGLANG|sgl[-_]|[Vv]ersion|server_args|0\.0\.0\.dev")
# pip show: "Name: sglang" then, a few lines on, "Version: 0.5.16"
_PIP_NAME = re.compile(r"^\s*Name:\s*(\S+)\s*$")
_PIP_VERSION = re.compile(r"^\s*Version:\s*" + _V + r"\s*$")


_EXPLICIT_KINDS = ("image tag", "version line", "pip show", "pip list", "wheel", "install path", "version field")


def _span(rels: list[str]) -> str:
    """'0.5.3' or '0.5.3 .. 0.5.4.post1 (6 releases)'."""
    return rels[0] if len(rels) == 1 else f"{rels[0]} .. {rels[-1]} ({len(rels)} releases)"


class ReleaseClue(BaseModel):
    kind: str
    value: str
    line: int
    releases: list[str] = Field(default_factory=list)  # candidates this clue allows ([] = explicit value)


class LogRelease(BaseModel):
    """What the log says about the SGLang release: ``release`` (one release, or None),
    ``candidates`` (the releases every clue allows), ``dev_build`` and the clues."""

    release: str | None = None
    candidates: list[str] = Field(default_factory=list)
    # the releases fitting most traceback frames when none fits all (a patched or
    # main-branch build), and whether releases older than the index could fit too
    closest: list[str] = Field(default_factory=list)
    older_possible: bool = False
    dev_build: str | None = None
    clues: list[ReleaseClue] = Field(default_factory=list)
    # the frames with the source line pasted under them: (srt file, line, function, source)
    sources: list[tuple[str, int, str, str]] = Field(default_factory=list)
    # a stated release whose code does not have the traceback's pasted lines: the releases
    # that have them (the version line is another process's, or the build is patched)
    disagree: list[str] = Field(default_factory=list)

    def text(self) -> str:
        if self.release and any(
            c.kind not in ("server args", "traceback lines", "message text")
            for c in self.clues
            if c.value == self.release
        ):
            c = next(c for c in self.clues if c.value == self.release)
            said = f"SGLang {self.release} ({c.kind}, line {c.line})"
            agree = sorted({k.kind for k in self.clues if k.releases and self.release in k.releases})
            if agree and not self.disagree:
                said += "; " + " and ".join(f"the {k}" for k in agree) + " fit it too"
            if self.disagree:
                said += (
                    f"; the traceback's pasted source lines fit {_span(self.disagree)} instead, not {self.release} "
                    "(the version line is another process's, or the build is patched)"
                )
            return said
        if self.dev_build:
            return f"a SGLang development build ({self.dev_build}), not a release"
        if self.release:
            return (
                f"SGLang {self.release} (the only release whose code fits: "
                f"{', '.join(sorted({c.kind for c in self.clues}))})"
            )
        kinds = ", ".join(sorted({c.kind for c in self.clues}))
        if self.candidates:
            span = (
                self.candidates[0]
                if len(self.candidates) == 1
                else f"{self.candidates[0]} .. {self.candidates[-1]} ({len(self.candidates)} releases)"
            )
            older = f" or a release before {self.candidates[0]} (not indexed)" if self.older_possible else ""
            return f"SGLang {span}{older}, from {kinds}"
        if self.closest:
            return (
                f"no SGLang release fits every traceback line (a patched or main-branch build); closest: "
                f"{', '.join(self.closest[:3])}"
            )
        if self.clues:
            scanned = (
                f"release of SGLang {linedigests.all_releases()[0]} .. {linedigests.all_releases()[-1]}"
                if any(c.kind == "traceback source lines" for c in self.clues)
                else "indexed release"
            )
            return f"not determined ({kinds} fit no {scanned})"
        return "not shown"


@functools.lru_cache(maxsize=1)
def load_index() -> dict[str, Any]:
    return json.loads(resources.files("kvcheck.explain").joinpath("release_index.json").read_text(encoding="utf-8"))


class ReleaseReader:
    """Streaming: ``feed`` each line; ``result()`` combines the clues (bounded: at most
    one clue per kind and value, 40 frames)."""

    MAX_FRAMES = 40

    def __init__(self) -> None:
        self.clues: list[ReleaseClue] = []
        self.frames: list[tuple[str, int, str, int]] = []
        self.fields: set[str] = set()
        self.fields_line = 0
        self.dev: str | None = None
        self._seen: set[tuple[str, str]] = set()
        self._pip_name: tuple[str, int] = ("", 0)
        self.srcs: dict[int, str] = {}  # frame index -> the source line pasted under it
        self._want_src = False

    def _clue(self, kind: str, value: str, line: int) -> None:
        if (kind, value) not in self._seen and len(self.clues) < 50:
            self._seen.add((kind, value))
            self.clues.append(ReleaseClue(kind=kind, value=value, line=line))

    def feed(self, lineno: int, line: str) -> None:
        if self._want_src:
            self._want_src = False
            st = line.strip()
            if st and not st.startswith(("File ", "Traceback", "^", "~")) and not _EXC_LINE.match(st):
                self.srcs[len(self.frames) - 1] = st[:300]
                return
        if not _HINT.search(line):
            return
        if "Name:" in line or "Version:" in line:
            n = _PIP_NAME.match(line)
            if n:
                self._pip_name = (n.group(1).lower(), lineno)
                return
            pv = _PIP_VERSION.match(line)
            if pv and self._pip_name[0] == "sglang" and lineno - self._pip_name[1] <= 3:
                self._clue("pip show", pv.group(1), lineno)
                return
        for kind, rx in EXPLICIT:
            m = rx.search(line)
            if m:
                v = next(g for g in m.groups() if g)
                self._clue(kind, v, lineno)
        d = DEV_BUILD.search(line)
        if d and self.dev is None:
            self.dev = d.group(0)
            self._clue("development build", d.group(0), lineno)
        sa = SERVER_ARGS.search(line)
        if sa:
            self.fields.update(FIELD.findall(sa.group("body")))
            self.fields_line = self.fields_line or lineno
        elif self.fields_line and lineno - self.fields_line < 4 and "=" in line and "(" not in line[:3]:
            self.fields.update(FIELD.findall(line))  # a dump wrapped over lines
        for fm in FRAME.finditer(line):
            if len(self.frames) < self.MAX_FRAMES:
                self.frames.append((fm.group("file"), int(fm.group("line")), fm.group("func"), lineno))
                self._want_src = True

    def result(self) -> LogRelease:
        out = LogRelease(clues=list(self.clues), dev_build=self.dev)
        out.sources = [(f, ln, fn, self.srcs[k]) for k, (f, ln, fn, _) in enumerate(self.frames) if k in self.srcs]
        explicit = [c for c in self.clues if c.kind in _EXPLICIT_KINDS]
        index = None
        cands: set[str] | None = None
        if self.fields - {"self"} and len(self.fields) >= 3:
            index = index or load_index()
            fit = [v for v in index["releases"] if set(self.fields) <= set(index["server_args"].get(v, []))]
            clue = ReleaseClue(
                kind="server args", value=f"{len(self.fields)} fields", line=self.fields_line, releases=fit
            )
            out.clues.append(clue)
            cands = set(fit)
        if self.frames:
            index = index or load_index()
            order, kind, closest = self._frames_fit(index)
            if order is not None:
                out.clues.append(
                    ReleaseClue(kind=kind, value=f"{len(self.frames)} frames", line=self.frames[0][3], releases=order)
                )
                if cands is not None:
                    # a server-args dump decides only the indexed releases (``release_index``)
                    cands |= set(order) - set(index["releases"])
                cands = set(order) if cands is None else cands & set(order)
                if not order:
                    out.closest = closest
        if explicit:
            out.release = explicit[0].value
            out.candidates = [explicit[0].value]
            tb = next((c for c in out.clues if c.kind.startswith("traceback")), None)
            if tb is not None and tb.releases and out.release not in tb.releases and self._decides(out.release):
                out.disagree = tb.releases
            return out
        if cands is not None:
            from kvcheck.sglang.releases import release_key

            out.candidates = sorted(cands, key=release_key)
            by_text = any(c.kind == "traceback source lines" for c in out.clues)
            first = linedigests.all_releases()[0] if by_text else (index or load_index())["releases"][0]
            out.older_possible = bool(out.candidates) and out.candidates[0] == first
            if len(out.candidates) == 1 and not self.dev:
                out.release = out.candidates[0]
        return out

    def _decides(self, release: str) -> bool:
        """Whether some frame's evidence covers ``release`` (the index's spans or the digests)."""
        return release in load_index()["releases"] or (
            release in linedigests.all_releases()
            and any(k in self.srcs and linedigests.covered(f) for k, (f, *_) in enumerate(self.frames))
        )

    def _frames_fit(self, index: dict[str, Any]) -> tuple[list[str] | None, str, list[str]]:
        """(the releases every frame fits, oldest first, or None when no frame is evidence;
        the clue's kind; the releases fitting the most frames when none fits all).

        Each frame decides the releases it has evidence for: the releases of the index
        (0.5.5 on) by whether its function spans the line, and, where its source line is
        pasted and the file is in ``line_digests`` (0.5.1 on), every release of that table by
        whether its file has that text at that line. The pasted text wins over line numbers:
        a release whose line N holds other text does not fit, whatever the function's span; a
        release a frame has no evidence for is not refused by that frame."""
        from kvcheck.sglang.releases import release_key

        universe: set[str] = set()
        misfit: dict[str, int] = {}
        fitting: dict[str, int] = {}
        by_text = False
        for k, (file, ln, func, _) in enumerate(self.frames):
            decided: set[str] = set()
            ok: set[str] = set()
            if any(file in index["files"][v] for v in index["releases"]):
                for v in index["releases"]:
                    decided.add(v)
                    t = index["files"][v].get(file)
                    spans = index["tables"][t].get(func, []) if t is not None else []
                    if any(a <= ln <= b for a, b in spans):
                        ok.add(v)
            src = self.srcs.get(k)
            if src and linedigests.covered(file):
                text_ok = set(linedigests.releases_fitting(file, ln, src))
                ok = (ok & text_ok) | (text_ok - decided)
                decided |= set(linedigests.all_releases())
                by_text = True
            if not decided:
                continue  # a file kvcheck does not index: no evidence either way
            universe |= decided
            for v in decided - ok:
                misfit[v] = misfit.get(v, 0) + 1
            for v in ok:
                fitting[v] = fitting.get(v, 0) + 1
        if not universe:
            return None, "", []
        fit = sorted((v for v in universe if not misfit.get(v)), key=release_key)
        closest: list[str] = []
        if not fit and fitting:
            best = max(fitting.values())
            closest = sorted((v for v in universe if fitting.get(v) == best), key=release_key)
        return fit, "traceback source lines" if by_text else "traceback lines", closest
