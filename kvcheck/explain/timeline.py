"""The order of a log: start-up, the first request, serving, a restart.

Each process prints recognizable milestones (SGLang: the server-args dump, weights
loaded, KV cache allocated, NIXL agent created, "The server is fired up", the warmup;
requests: HTTP request lines, "Prefill batch"/"Decode batch", the decode's GET /route;
vLLM, Mooncake and Dynamo have their own). ``Timeline`` reads them line by line and tells
the phase of any line: ``startup`` until the first request, ``first-request`` while the
first requests are in flight (before any request completed), ``serving`` after, and
``after-peer-restart`` once a peer was lost and came back (a start-up sequence after
serving, a remote disconnect, an agent re-added). ``phase_at(line)`` answers from the
milestones seen before that line; with no milestone at all it answers ``""`` (the log
does not show its phase, and the caller uses the message's own).
"""

from __future__ import annotations

import re
from bisect import bisect_right
from dataclasses import dataclass, field

STARTUP = [
    re.compile(p)
    for p in (
        r"server_args=ServerArgs\(|\bserver_args=|\bLoad weight (?:begin|end)\b|KV Cache is allocated|Memory pool "
        r"end|max_total_num_tokens=|Init torch distributed begin",
        r"Backend UCX was instantiated|Initialized NIXL agent|Loaded plugin UCX|MD listener is listening",
        r"Started server process|Waiting for application startup|Application startup complete|Uvicorn running on",
        r"Start of prefill warmup|End of prefill warmup|Capturing (?:batches|CUDA graph)|vLLM API server "
        r"version|Registering KV_Caches|init engine \(profile|EngineCore failed to start|Initializing NIXL "
        r"worker",
        r"Transfer Engine (?:starting|uses address|RPC using)|Topology discovery complete|Auto-discovering "
        r"topology|RDMA device: \w+",
        r"Creating v1 connector|Starting vLLM|Automatically detected platform|Loading LMCache config|LMCache "
        r"Configuration",
        r"CommonKVBootstrapServer started|Prefill instance failed to register to bootstrap server",
        # HiCache's storage backend built by the scheduler (mooncake_store.py MooncakeStore.__init__ /
        # warmup: "Mooncake store setup successfully.", hicache_simm.py alike, 0.5.x)
        r"\b\w+ store (?:setup|warmup) successfully",
    )
]
READY = re.compile(
    r"The server is fired up and ready to roll|Application startup complete|Uvicorn running on|Starting router on"
)
REQUEST = re.compile(
    r"\"(?:POST|GET) /(?:generate|v1/(?:chat/)?completions)\b|\bPOST /(?:generate|v1/)|\"GET /route\?|\bGET "
    r"/route\b|\bPrefill batch[.,]|\bDecode batch[.,]"
    r"|Avg prompt throughput: [1-9]|start_load_kv for request|Added request|Prefilling remotely|\bbootstrap_room=\d+"
    # a request's KV transfer that failed (SGLang's decode.py / prefill.py "Decode transfer failed for
    # request rank=..." / "Prefill transfer failed for request rank=...", 0.5.5 .. 0.5.23; pasted as
    # "Decode transfer failed ..."): a request reached the transfer
    r"|\b(?:Decode|Prefill) transfer failed\b"
)
DONE = re.compile(
    r"\"POST /(?:generate|v1/\S+) HTTP/1\.1\" 200|POST /(?:generate|v1/\S+) HTTP/1\.1\" 200 OK|\bDecode "
    r"batch[.,].*#running-req: [1-9]|gen throughput \(token/s\): [1-9]"
)
# the line SGLang prints once its warm-up request is through (the server is ready)
WARMED_UP = re.compile(r"The server is fired up and ready to roll")
_WARMUP_REQUESTS = 4  # request lines a warm-up shows at most (its POST, the PD fake transfer's lines)
DECODING = re.compile(r"\bDecode batch[.,].*gen throughput \(token/s\): [1-9]")
WARMUP = re.compile(r"warmup|FakeKVSender|Fake", re.I)
PEER_LOST = re.compile(
    r"NIXL_ERR_REMOTE_DISCONNECT|Peer reconnected|\bnot exist\b.*agent|agent.*\bnot exist\b|remote mooncake session "
    r"\S+ is not alive|heartbeat.*(?:fail|lost)|Remote I/O error"
)


# a line can be a milestone only if it holds one of these (one search per line)
_HINT = re.compile(
    r"server_args|Load weight|KV Cache|Memory pool|max_total|torch distributed|NIXL|UCX|plugin|listener|server "
    r"process|startup|Uvicorn|warmup|Capturing|vLLM|KV_Caches|init engine|EngineCore|Transfer "
    r"Engine|Topology|RDMA device|connector|LMCache|detected platform|Bootstrap|bootstrap|fired "
    r"up|router|POST|GET|batch|throughput|load_kv|Added request|remotely|Peer|transfer failed|not "
    r"exist|mooncake|heartbeat|Remote I/O| store "
)


# a transfer engine rebuilding its connection to a peer (Mooncake's rdma_endpoint
# ``Re-establish connection`` / ``Successfully reset the endpoint``, UCX/NIXL reconnects)
RECONNECT = re.compile(
    r"Re-?establish(?:ing|ed)? (?:the )?connection|Successfully reset the endpoint|\b[Rr]econnect(?:ing|ed)?\b(?! "
    r"failed)"
)


@dataclass
class Event:
    line: int
    kind: str  # startup, ready, request, done, peer-lost, restart
    text: str = ""


@dataclass
class Timeline:
    """Milestones in line order (bounded: the first of each kind per phase change)."""

    events: list[Event] = field(default_factory=list)
    _starts: list[int] = field(default_factory=list)  # line numbers where a phase begins
    _phases: list[str] = field(default_factory=list)
    _phase: str = ""
    _requests: int = 0
    _done: bool = False
    _restarted: bool = False
    reconnects: list[int] = field(default_factory=list)  # lines where a connection to a peer was rebuilt
    mooncake_reconnects: bool = False  # some of them in Mooncake's words (its rdma_endpoint's)
    ready_line: int = 0  # the first "server is fired up" / "startup complete" line (0: none shown)

    def _enter(self, lineno: int, phase: str, kind: str, text: str) -> None:
        if phase == self._phase:
            return
        self._phase = phase
        self._starts.append(lineno)
        self._phases.append(phase)
        if len(self.events) < 200:
            self.events.append(Event(lineno, kind, text.strip()[:200]))

    def feed(self, lineno: int, line: str) -> None:
        if ("stablish" in line or "econnect" in line or "reset the endpoint" in line) and RECONNECT.search(line):
            if len(self.reconnects) < 50:
                self.reconnects.append(lineno)
            self.mooncake_reconnects = self.mooncake_reconnects or "stablish" in line or "reset the endpoint" in line
        if not line or len(line) < 8 or not _HINT.search(line):
            return
        warm = WARMUP.search(line)
        if DONE.search(line) and not warm:
            self._requests += 1
            if DECODING.search(line) and self._phase in ("", "startup", "first-request"):
                # a decode generating tokens has received a request's KV: past the first transfer
                self._enter(lineno, "serving", "request", line)
            elif self._phase in ("", "startup"):
                self._enter(lineno, "first-request", "request", line)
            self._done = True
            return
        if REQUEST.search(line) and not warm:
            self._requests += 1
            if self._phase in ("", "startup"):
                self._enter(lineno, "first-request", "request", line)
            elif self._done and self._phase == "first-request":
                self._enter(lineno, "serving", "request", line)
            return
        if PEER_LOST.search(line) and self._phase in ("first-request", "serving"):
            self._enter(lineno, "after-peer-restart", "peer-lost", line)
            return
        if any(p.search(line) for p in STARTUP):
            if self._phase in ("", "startup"):
                self._enter(lineno, "startup", "startup", line)
            elif self._phase in ("first-request", "serving") and self._requests:
                self._restarted = True
                self._enter(lineno, "after-peer-restart", "restart", line)
            return
        if READY.search(line) and self._phase in ("", "startup"):
            self.ready_line = self.ready_line or lineno
            self._enter(lineno, "startup", "ready", line)
        elif (
            self._phase == "first-request"
            and not self._restarted
            and self._requests <= _WARMUP_REQUESTS
            and WARMED_UP.search(line)
        ):
            # SGLang says it is ready only after its own warm-up request went through
            # (http_server._wait_and_warmup: _execute_server_warmup, then "The server is fired
            # up and ready to roll!", 0.5.5 .. 0.5.23): the requests before it were the
            # warm-up's, and start-up lasts until this line
            self.ready_line = self.ready_line or lineno
            self._requests, self._done = 0, False
            self._enter(lineno, "startup", "ready", line)

    def phase_at(self, lineno: int) -> str:
        """The phase in force at ``lineno`` ('' when the log shows none before it)."""
        i = bisect_right(self._starts, lineno) - 1
        if i < 0:
            # a failure before any milestone: start-up only when start-up lines follow it
            return ""
        return self._phases[i]

    @property
    def shown(self) -> bool:
        return bool(self._phases)

    def summary(self) -> list[dict]:
        return [{"line": e.line, "kind": e.kind, "text": e.text} for e in self.events]
