"""What every general rule of ``kvcheck explain`` shares: the documented meanings
(``generic.yaml``), the finding a rule yields, and where a path or a NIXL call belongs.

``rules()`` loads ``generic.yaml`` (NIXL status codes, UCX status strings, errno of memory
registration and of sockets, RDMA work-completion statuses, the component of each native
source file, the subsystem of each SGLang module, the kind of each Python exception).
``GenericFinding`` is what a rule says: what failed (component, phase), the cause where
the meaning decides it, the commands to run and the fix.
"""

from __future__ import annotations

import functools
import re
from dataclasses import dataclass, field
from importlib import resources
from typing import Any

import yaml


@functools.lru_cache(maxsize=1)
def rules() -> dict[str, Any]:
    """``generic.yaml`` with its patterns compiled (cached)."""
    text = resources.files("kvcheck.explain").joinpath("generic.yaml").read_text(encoding="utf-8")
    data = yaml.load(text, Loader=getattr(yaml, "CSafeLoader", yaml.SafeLoader))
    data["_components"] = [(re.compile(c["re"]), c) for c in data["components"]]
    data["_modules"] = [(re.compile(m["re"]), m["subsystem"]) for m in data["sglang_modules"]]
    data["_api"] = [(re.compile(a["re"]), a) for a in data["nixl_api"]]
    data["_exc_kind"] = {t: k for k, ts in data["python_exceptions"].items() for t in ts}
    data["_places"] = [(re.compile(p["re"]), p["engine"], p["component"]) for p in data["native_places"]]
    data["_library_exceptions"] = [
        (re.compile(x["type"]), re.compile(x["module"]), x) for x in data["library_exceptions"]
    ]
    data["_message_classes"] = [(re.compile(c["re"]), c) for c in data["message_classes"] if "frame" not in c]
    # classes read only under a given innermost frame (``path:function``)
    data["_frame_classes"] = [
        (re.compile(c["re"]), re.compile(c["frame"]), c) for c in data["message_classes"] if "frame" in c
    ]
    data["_crash_steps"] = [
        (re.compile(c["re"]), c["step"], c["phase"], bool(c.get("anytime"))) for c in data["crash_steps"]
    ]
    data["_ucx_transport"] = [(re.compile(t["re"]), re.compile(t["need"]), t) for t in data["ucx_transport"]]
    known: dict[tuple[str, str], list[tuple[dict[int, re.Pattern[str]], dict]]] = {}
    for k in data["known_messages"]:
        when = {int(i): re.compile(rx) for i, rx in (k.get("when") or {}).items()}
        for fmt in k.get("formats") or [k["format"]]:
            known.setdefault((k["engine"], fmt), []).append((when, k))
    data["_known_messages"] = known
    data["_known_crashes"] = [(re.compile(c["re"]), c) for c in data["known_crashes"]]
    return data


@dataclass
class GenericFinding:
    id: str
    title: str
    engine: str
    line: int
    phase: str = ""  # '' = the caller's timeline decides
    component: str = ""
    cause: str = ""
    checks: list[str] = field(default_factory=list)
    fix: str = ""
    text: str = ""
    role: str = "cause"
    lines: list[int] = field(default_factory=list)
    node: bool = False  # from a node command's output pasted with the log (a precondition)
    # the SGLang releases whose source formats the message (``formats``), [] when not SGLang's
    releases: list[str] = field(default_factory=list)
    # the innermost SGLang frame of a traceback, ``srt/...py:function`` ('' when none)
    frame: str = ""
    # that frame's line number ('' when not shown), and whether the traceback shows the
    # exception raised below it (its last line; False for a traceback cut before it)
    frame_line: str = ""
    frame_raised: bool = False
    # ``phase`` is only a default: what the process was doing happens in any phase (a progress
    # thread waiting for events), so the phase the log shows decides, a start-up one included
    phase_log: bool = False


# an Itanium C++ ABI mangled name as glibc's backtrace_symbols prints a frame without
# symbol resolution (UCX's "==== backtrace" without BFD): ``_ZN19nixlUcxSharedThread3runEv``
_MANGLED = re.compile(r"\b_Z(?:N[KVR]*(?:St)?(?:\d+\w+?)+(?:C[123]|D[012])?E|\d+\w+?)\w*")
_MANGLED_PART = re.compile(r"(\d+)")


def demangle_names(text: str) -> str:
    """``text`` with the plain mangled C++ names in it written as their qualified names
    (``_ZN19nixlUcxSharedThread3runEv`` -> ``nixlUcxSharedThread::run``,
    ``_ZNK13nixlUcxWorker3armEv`` -> ``nixlUcxWorker::arm``, ``_ZN4ucxx6WorkerC2Ev`` ->
    ``ucxx::Worker::Worker``): the names the signatures and crash places are written in,
    as a backtrace with symbol resolution prints them. Only nested names of source
    identifiers (the Itanium ABI's ``<length><identifier>`` parts, a leading ``St`` as
    ``std``, a constructor or destructor at the end) are rewritten; the parameter types
    are dropped; a name with templates or substitutions is left as it is."""
    if "_Z" not in text:
        return text
    return _MANGLED.sub(_demangle_one, text)


def _demangle_one(m: re.Match) -> str:
    name = m.group(0)
    nested = name.startswith("_ZN")
    i = 3 if nested else 2
    while nested and i < len(name) and name[i] in "KVR":
        i += 1
    parts: list[str] = []
    if nested and name.startswith("St", i):
        parts.append("std")
        i += 2
    while i < len(name) and name[i].isdigit():
        n = _MANGLED_PART.match(name, i)
        if n is None:
            break
        size, i = int(n.group(1)), n.end()
        if size <= 0 or i + size > len(name):
            return name
        parts.append(name[i : i + size])
        i += size
        if not nested:
            break
    if not parts:
        return name
    if nested:
        if name.startswith(("C1", "C2", "C3"), i):
            parts.append(parts[-1])
            i += 2
        elif name.startswith(("D0", "D1", "D2"), i):
            parts.append("~" + parts[-1])
            i += 2
        if not name.startswith("E", i):
            return name  # templates, substitutions: not read here
    return "::".join(parts)


def engine_of_module(path: str) -> str:
    p = path.replace("\\", "/")
    if not p.startswith("/"):  # a path pasted relative to site-packages: ``sglang/srt/...``
        p = "/" + p
    for eng, key in (
        ("dynamo", "/dynamo/"),
        ("sglang", "/sglang/"),
        ("vllm-ascend", "/vllm_ascend/"),
        ("vllm", "/vllm/"),
        ("trtllm", "/tensorrt_llm/"),
        ("lmcache", "/lmcache/"),
        ("nixl", "/nixl"),
        ("mooncake", "/mooncake/"),
    ):
        if key in p:
            return eng
    return ""


def sglang_subsystem(path: str) -> str:
    p = path.replace("\\", "/")
    for rx, sub in rules()["_modules"]:
        m = rx.search(p)
        if m:
            return sub.format(**{k: v for k, v in m.groupdict().items() if v})
    return ""


def nixl_step(text: str) -> tuple[str, str]:
    for rx, a in rules()["_api"]:
        if rx.search(text):
            return a["step"], a["phase"]
    return "", ""
