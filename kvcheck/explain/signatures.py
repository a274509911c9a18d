"""Known crash and failure signatures: the NIXL/UCX/Mooncake/MORI native failures people
hit, the tracebacks of SGLang bugs fixed since, and the other engines' known failures
(named as theirs).

Data: ``signatures.yaml``. A signature is a set of line patterns read together, as the
message formats print them (a UCX ``Caught signal 11`` header *and* the backtrace frame
that locates it; a glog line of ``rdma_endpoint.cpp`` *and* its text), never a fragment:

- ``all``: each regex must match a line within ``within`` lines of the others;
- ``any``: at least one of these must match in that window as well (optional);
- ``unless``: the signature does not apply when one of these matches in the window;
- ``suppresses``: the more general signatures this one replaces when both match;
- ``phase``: where the runtime fails when the log shows no phase of its own
  (``startup``, ``first-request``, ``first-transfer``, ``serving``, ``after-peer-restart``);
- ``role``: ``cause`` (a first cause), ``consequence`` (what follows another failure:
  time-outs, aborts, wrappers);
- ``cause``, ``checks`` (commands to run on the node), ``fix``, ``issues`` (public
  threads), ``fixed_in`` (the release or change that fixed it, or null), ``engine``
  (whose text it is) and ``host`` (the engines whose processes print it).

``SignatureScanner`` reads lines one by one in bounded memory: a prefilter regex (the
union of all patterns) keeps the per-line cost to one search; only lines it matches are
tested pattern by pattern, with the last positions of each pattern kept per signature.
"""

from __future__ import annotations

import functools
import os
import re
from collections import deque
from importlib import resources
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, PrivateAttr

from kvcheck.explain.rulebase import demangle_names

Phase = Literal[
    "startup",
    "first-request",
    "decode-registration",
    "first-transfer",
    "serving",
    "after-peer-restart",
    "shutdown",
    "any",
]


# a server log's bulk (batch statistics, HTTP access lines): no signature reads them
_BULK = re.compile(
    r"\[\d{4}-\d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)?(?: [A-Z_]+\d+)*\] (?:Decode batch|Prefill batch|INFO: +[\d.]+:\d+ - "
    r"\"(?:GET|POST) [^\"]*\" [23]\d\d)"
)


class Signature(BaseModel):
    """One known failure, as ``signatures.yaml`` describes it."""

    model_config = ConfigDict(extra="forbid")

    id: str
    title: str
    engine: str
    host: list[str] = Field(default_factory=list)
    # host applies even to a library's text (its meaning holds only in those processes)
    strict_host: bool = False
    all: list[str]
    any: list[str] = Field(default_factory=list)
    unless: list[str] = Field(default_factory=list)
    within: int = 60
    suppresses: list[str] = Field(default_factory=list)
    phase: Phase = "any"
    # what fails runs in any phase (a progress thread arming its worker): ``phase`` is the
    # one the threads saw, and a log that still shows the start-up says start-up
    phase_log: bool = False
    process: str = ""
    role: Literal["cause", "consequence"] = "cause"
    cause: str
    meaning: str = ""
    checks: list[str] = Field(default_factory=list)
    fix: str
    issues: list[str] = Field(default_factory=list)
    fixed_in: str | None = None
    followed_by: str = ""
    predicted_by: str | None = None
    refused: list[str] = Field(default_factory=list)  # option values this failure shows refused
    _all: list[re.Pattern[str]] = PrivateAttr(default_factory=list)
    _any: list[re.Pattern[str]] = PrivateAttr(default_factory=list)
    _unless: list[re.Pattern[str]] = PrivateAttr(default_factory=list)

    def compile(self) -> None:
        self._all = [re.compile(p) for p in self.all]
        self._any = [re.compile(p) for p in self.any]
        self._unless = [re.compile(p) for p in self.unless]

    def summary(self) -> dict[str, Any]:
        return self.model_dump(exclude={"all", "any", "unless", "within", "suppresses"})


class SignatureHit(BaseModel):
    """A signature found in the text: where, how often, the values its patterns read."""

    id: str
    first_line: int
    last_line: int
    count: int = 1
    lines: list[int] = Field(default_factory=list)
    text: str = ""
    values: dict[str, str] = Field(default_factory=dict)
    phase: str = ""
    phase_from: str = ""  # "log" (the log's own events) or "signature" (its default)
    process: str = ""
    host: str = ""


@functools.lru_cache(maxsize=1)
def load_signatures() -> tuple[Signature, ...]:
    text = resources.files("kvcheck.explain").joinpath("signatures.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    # KVCHECK_EXPLAIN_DISABLE: signature ids left out (comma-separated): a measuring hook
    # (leave-one-round-out: what the general rules catch without the per-log signatures)
    off = {x.strip() for x in os.environ.get("KVCHECK_EXPLAIN_DISABLE", "").split(",") if x.strip()}
    sigs = tuple(Signature(**d) for d in data["signatures"] if d["id"] not in off)
    ids = [s.id for s in sigs]
    if len(ids) != len(set(ids)):
        raise ValueError("duplicate signature ids")
    for s in sigs:
        s.compile()
    return sigs


def signature(sig_id: str) -> Signature:
    for s in load_signatures():
        if s.id == sig_id:
            return s
    raise KeyError(sig_id)


class SignatureScanner:
    """Streaming matcher over numbered lines (see the module docstring)."""

    KEEP = 64  # recent positions kept per pattern

    def __init__(self, sigs: tuple[Signature, ...] | None = None):
        self.sigs = sigs or load_signatures()
        pats: dict[str, int] = {}
        self.index = pats
        self.pattern_list: list[re.Pattern[str]] = []
        self.uses: list[list[tuple[int, str, int]]] = []  # pattern index -> (sig index, group, position)
        for si, s in enumerate(self.sigs):
            for group, plist in (("all", s.all), ("any", s.any), ("unless", s.unless)):
                for k, p in enumerate(plist):
                    idx = pats.setdefault(p, len(self.pattern_list))
                    if idx == len(self.pattern_list):
                        self.pattern_list.append(re.compile(p))
                        self.uses.append([])
                    self.uses[idx].append((si, group, k))
        unnamed = (re.sub(r"\(\?P<\w+>", "(?:", p.pattern) for p in self.pattern_list)
        self.prefilter = re.compile("|".join(f"(?:{p})" for p in unnamed))
        self.recent: list[deque[tuple[int, str]]] = [deque(maxlen=self.KEEP) for _ in self.pattern_list]
        self.hits: dict[str, SignatureHit] = {}
        self._values: dict[str, dict[str, str]] = {}

    def feed(self, lineno: int, line: str, process: str = "", host: str = "") -> list[str]:
        """Test one line; returns the ids of signatures completed on it."""
        if "_Z" in line:  # a backtrace frame's mangled C++ name, as the patterns write it
            line = demangle_names(line)
        if _BULK.match(line) or self.prefilter.search(line) is None:
            return []
        touched: set[int] = set()
        for idx, pat in enumerate(self.pattern_list):
            m = pat.search(line)
            if m is None:
                continue
            self.recent[idx].append((lineno, line))
            for si, _, _ in self.uses[idx]:
                touched.add(si)
                gd = {k: v for k, v in m.groupdict().items() if v is not None}
                if gd:
                    self._values.setdefault(self.sigs[si].id, {}).update(gd)
        done = []
        for si in sorted(touched):
            if self._complete(si, lineno, line, process, host):
                done.append(self.sigs[si].id)
        return done

    def _positions(self, pattern: str) -> deque[tuple[int, str]]:
        return self.recent[self.index[pattern]]

    def _complete(self, si: int, lineno: int, line: str, process: str, host: str) -> bool:
        s = self.sigs[si]
        lo = lineno - s.within
        firsts = []
        for p in s.all:
            pos = [n for n, _ in self._positions(p) if n >= lo]
            if not pos:
                return False
            firsts.append(min(pos))
        if s.any:
            anys = [n for p in s.any for n, _ in self._positions(p) if n >= lo]
            if not anys:
                return False
            firsts.append(min(anys))
        if any(n >= lo for p in s.unless for n, _ in self._positions(p)):
            return False
        first = min(firsts)
        hit = self.hits.get(s.id)
        if hit is None:
            text = next((t for p in s.all[:1] for n, t in self._positions(p) if n >= lo), line).strip()
            self.hits[s.id] = SignatureHit(
                id=s.id,
                first_line=first,
                last_line=lineno,
                lines=sorted(set(firsts)),
                text=text[:500],
                values=dict(self._values.get(s.id, {})),
                process=process,
                host=host,
            )
            return True
        if first > hit.last_line:  # a new occurrence, after the last one ended
            hit.count += 1
        hit.last_line = max(hit.last_line, lineno)
        if not hit.process and process:
            hit.process = process
        return False

    def finish(self) -> list[SignatureHit]:
        """The hits, a more specific signature replacing the general ones it names."""
        drop: set[str] = set()
        for h in self.hits.values():
            drop.update(signature_by_id(self.sigs, h.id).suppresses)
        return sorted((h for h in self.hits.values() if h.id not in drop), key=lambda h: (h.first_line, h.id))


def signature_by_id(sigs: tuple[Signature, ...], sig_id: str) -> Signature:
    for s in sigs:
        if s.id == sig_id:
            return s
    raise KeyError(sig_id)
