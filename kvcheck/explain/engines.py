"""Log lines that are not SGLang's own: other engines (vLLM, TensorRT-LLM, Mooncake's
transfer engine) and the NIXL/UCX native libraries.

``kvcheck explain`` reads whole logs and pasted lines. A line written by another engine
may share words with SGLang's messages (``NIXL``, ``KV transfer``, ``page size``); it is
recognized as that engine's and never explained from SGLang's code. NIXL's and UCX's own
log lines (C++ ``[NIXL]``/``nixl_*`` sources, ``UCX  ERROR``) at agent or backend
creation mean the node's transfer stack failed at start-up: they are reported as such.

Markers are whole-word patterns taken from each project's own log formats: vLLM's
logger prefix (``(VllmWorker ...)``, ``vllm.`` module paths, ``NixlConnector``),
TensorRT-LLM's (``[TRT-LLM]``, ``tensorrt_llm``), Mooncake's transfer engine
(``transfer_engine.cpp``, ``mooncake::``), UCX's (``UCX  ERROR``, ``ucp_``/``uct_``
sources), NIXL's (``nixl_*.cpp``, ``[NIXL]``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass

from pydantic import BaseModel


@dataclass(frozen=True)
class Engine:
    """A foreign log source: ``id``, a display ``name``, the line ``pattern`` that marks
    it, and what kvcheck says about such lines (``meaning``)."""

    id: str
    name: str
    pattern: re.Pattern[str]
    meaning: str


ENGINES: tuple[Engine, ...] = (
    Engine(
        "vllm", "vLLM",
        re.compile(r"\(VllmWorker\b|\bvllm\.(?:distributed|v1|engine|worker|entrypoints)\b|\bNixlConnector(?:Worker|Scheduler)?\b|^\s*(?:INFO|WARNING|ERROR|DEBUG)\s+\d\d-\d\d \d\d:\d\d:\d\d \[[\w./]+\.py:\d+\]"),
        "a vLLM log line (its NIXL connector has its own handshake and checks); kvcheck models SGLang's PD path, so it is not explained from SGLang's code",
    ),
    Engine(
        "trtllm", "TensorRT-LLM",
        re.compile(r"\[TRT-LLM\]|\btensorrt_llm\b|\[TensorRT-LLM\]"),
        "a TensorRT-LLM log line (its own KV cache transceiver); not explained from SGLang's code",
    ),
    Engine(
        "mooncake", "Mooncake transfer engine",
        re.compile(r"\btransfer_engine(?:_impl)?\.cpp\b|\bmooncake::|\brdma_(?:context|endpoint|transport)\.cpp\b|\btransfer_metadata\.cpp\b"),
        "a log line of Mooncake's transfer engine library (SGLang's default --disaggregation-transfer-backend mooncake, not NIXL); kvcheck does not model the Mooncake transfer, so it is not explained from SGLang's NIXL code",
    ),
    Engine(
        "nixl-ucx", "NIXL/UCX native library",
        re.compile(r"\bUCX\s+(?:ERROR|WARN)\b|\b(?:ucp|uct|ucs)_\w+\.c:\d+|\bnixl_\w+\.cpp:\d+|\[NIXL\]|\bnixlBackendEngine\b|\bFailed to create (?:backend|UCX)\b"),
        "a log line of the NIXL or UCX native library; at start-up (agent or backend creation, memory registration) it means the node's transfer stack failed to start: the server exits at start-up (NixlKVManager.__init__). Check the node's devices (UCX_NET_DEVICES, UCX_TLS, ibv_devinfo) and run `kvcheck agent` on the node to reproduce it without the server",
    ),
)


class ForeignLines(BaseModel):
    """Lines of one foreign source in the text read: count, first/last line numbers and
    the first line (cut to 300 characters)."""

    engine: str
    name: str
    meaning: str
    count: int = 0
    first_line: int = 0
    last_line: int = 0
    example: str = ""


def classify(line: str) -> Engine | None:
    """The foreign source that wrote ``line``, or None for a line that may be SGLang's."""
    for engine in ENGINES:
        if engine.pattern.search(line):
            return engine
    return None


def record(found: dict[str, ForeignLines], engine: Engine, lineno: int, line: str) -> None:
    """Count ``line`` (number ``lineno``) for ``engine`` in ``found``."""
    f = found.get(engine.id)
    if f is None:
        text = line.strip()
        f = found[engine.id] = ForeignLines(engine=engine.id, name=engine.name, meaning=engine.meaning, first_line=lineno, example=text[:300] + ("…" if len(text) > 300 else ""))
    f.count += 1
    f.last_line = lineno
