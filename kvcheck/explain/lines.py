"""Whose line is it: the engine and the process (prefill, decode, router) of every log line.

A pasted log mixes processes and projects: SGLang's scheduler lines, the vLLM worker
lines of another deployment, the native logs of NIXL, UCX and Mooncake's transfer engine,
Python and native crash dumps. Each is told apart by the line format its project prints:

- SGLang: ``[2026-05-21 16:41:11 DP2 TP2 EP2] msg`` (``sglang.srt.utils`` log prefix: the
  time, then the ranks), uvicorn lines behind the same prefix, tracebacks through
  ``sglang/srt/...``; under Dynamo its module loggers print
  ``2025-12-10T13:50:14.788Z  INFO model_runner.load_model: msg``. The router:
  ``sglang_router_rs::...`` / ``sgl_model_gateway::...`` / ``smg::...`` (Rust tracing
  targets) and ``mini_lb``.
- vLLM: ``(Worker_DP0_EP0 pid=N) ERROR 10-16 17:22:56 [nixl_connector.py:815] msg`` (the
  process prefix, possibly nested: ``(Worker pid=1) (Worker_TP1 pid=2)``), or the older
  ``INFO 03-22 13:43:51 worker.py:269] msg``; ``vllm/...`` paths.
- TensorRT-LLM: ``[TensorRT-LLM][WARNING]``, ``[TRT-LLM] [I]``, ``[_torch][RANK 0]``,
  ``[executor][RANK 1]``, ``[kv cache manager]``, ``tensorrt_llm/`` paths.
- LMCache: ``[2025-05-08 07:54:57,961] LMCache WARNING: msg (file.py:N:lmcache.mod)``.
- Dynamo: ``2025-04-26T20:46:29.907Z ERROR engine.start: msg`` (tracing format),
  ``... [WARNING] [cli] msg``; ``dynamo_runtime``/``serve_dynamo`` targets.
- NIXL native: glog/absl lines of ``nixl_agent.cpp``, ``backend_plugin.h``,
  ``ucx_utils.cpp``, ``gpunetio_backend.cpp``, ``libfabric_*.cpp``; the Python binding's
  ``NIXL INFO _api.py:N`` lines and ``nixl._bindings.nixl*Error: NIXL_ERR_*``.
- UCX native: ``[ts] [host:pid:tid] file.c:N  UCX  ERROR msg``, ``Caught signal 11``
  (UCX's signal handler), ``==== backtrace ====`` and its frames.
- Mooncake transfer engine / store: glog lines of its C++ files (``transfer_engine*.cpp``,
  ``rdma_*.cpp``, ``tcp_transport.cpp``, ``transfer_metadata*.cpp``, ...).
- MORI (AMD's IO engine), LightLLM and other projects where their names show.

A line written by a library inside a process (a NIXL error in an SGLang traceback) belongs
to the library for *what it says*, and to the process for *where it ran*; a traceback
block takes the process engine of its frames (``sglang/`` vs ``vllm/`` paths).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

from kvcheck.explain.formats import whose

# Display names; "support" is what kvcheck explains for that engine.
ENGINE_NAMES = {
    "sglang": "SGLang",
    "sglang-router": "SGLang router",
    "vllm": "vLLM",
    "vllm-ascend": "vLLM-Ascend",
    "trtllm": "TensorRT-LLM",
    "lmcache": "LMCache",
    "dynamo": "Dynamo",
    "dynamo-vllm": "vLLM worker under Dynamo",
    "nixl": "NIXL (native library)",
    "ucx": "UCX (native library)",
    "libfabric": "libfabric / EFA",
    "mooncake": "Mooncake transfer engine",
    "mori": "MORI IO engine",
    "lightllm": "LightLLM",
    "vllm-omni": "vLLM-Omni",
    "xllm": "xLLM",
    "python": "Python runtime (crash dump)",
    "native": "native crash dump",
    "os": "operating system (a signal, the OOM killer)",
}
# what kvcheck can say about each engine's lines
SUPPORT = {
    "sglang": "explained from SGLang's own code (catalog, release by release)",
    "sglang-router": "named; a few of its PD messages (worker selection, PD dispatch, health checks, circuit "
    "breaker) are explained from its source (router.yaml), never from SGLang's or another project's formats",
    "nixl": "NIXL's errors and crash signatures are explained as they affect SGLang's NIXL backend",
    "ucx": "UCX errors and crash backtraces are matched to known signatures (cause, fixing release, node checks)",
    "libfabric": "EFA/libfabric errors are matched to known signatures",
    "mooncake": "Mooncake messages (transfer engine, store, its yalantinglibs RPC) are matched to known signatures "
    "and explained by the source component that prints them",
    "mori": "MORI IO engine messages are matched to known signatures; SGLang's MORI backend refusals (mori/conn.py) "
    "are explained from its code",
    "vllm": "named only: kvcheck models SGLang's PD path, not vLLM's NixlConnector; known vLLM signatures are "
    "pointed to their threads",
    "vllm-ascend": "named only: kvcheck does not model vLLM-Ascend",
    "trtllm": "named only: kvcheck does not model TensorRT-LLM's cache transceiver; known signatures are pointed to "
    "their threads",
    "lmcache": "named only: kvcheck does not model LMCache",
    "dynamo": "named; Dynamo's own lines are not explained (an SGLang worker under Dynamo is)",
    "dynamo-vllm": "named only: Dynamo's vLLM worker (its `INFO mm-dd hh:mm:ss engine.py:NNN]` lines); known "
    "signatures are pointed to their threads",
    "lightllm": "named only: kvcheck does not model LightLLM",
    "vllm-omni": "named only: kvcheck does not model vLLM-Omni; known signatures are pointed to their threads",
    "xllm": "named only: kvcheck does not model xLLM; known signatures are pointed to their threads",
    "python": "a Python fault dump: attributed to the engine its frames run in",
    "native": "a native stack dump: attributed to the library its frames name",
}

_TS = r"\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:[.,]\d+)?"
_VLLM_PROC = re.compile(r"^\s*\((?P<proc>[A-Za-z][\w]*(?:[ _][\w=]+)*?) pid=\d+\)\s*")
_VLLM_LEVEL = re.compile(
    r"^(?:INFO|WARNING|ERROR|DEBUG|CRITICAL) \d\d-\d\d \d\d:\d\d:\d\d(?:\.\d+)? "
    r"(?:\[(?P<file>[\w./-]+\.py):\d+\]|(?P<file2>[\w./-]+\.py):\d+\])"
)
_SGLANG = re.compile(
    r"^\[(?:"
    + _TS
    + r"(?P<ranks>(?: (?:DP|TP|EP|PP|CP|ATTN_CP|ATTN_DP|MOE_DP|ATTN_TP|MOE_EP)\d+)*)"
    # the prefix with its time cut off in a paste: the ranks alone (``[DP3 TP3 EP3 PP1] ``)
    + r"|(?:DP|TP|EP|PP|CP|ATTN_CP|ATTN_DP|MOE_DP|ATTN_TP|MOE_EP)\d+(?: "
    r"(?:DP|TP|EP|PP|CP|ATTN_CP|ATTN_DP|MOE_DP|ATTN_TP|MOE_EP)\d+)*"
    r")\] "
)
_LMCACHE = re.compile(
    r"^\["
    + _TS
    + r"\] LMCache (?:INFO|WARNING|ERROR|DEBUG)\b|\bLMCache (?:INFO|WARNING|ERROR|DEBUG):|:lmcache\.[\w.]+\)"
)
_TRACING = re.compile(
    r"^" + r"\d{4}-\d\d-\d\dT\d\d:\d\d:\d\d(?:\.\d+)?Z\s+"
    r"(?P<level>INFO|WARN|WARNING|ERROR|DEBUG|TRACE)\s+(?P<target>[\w.:<>]+): "
)
_DYNAMO_CLI = re.compile(r"^" + r"\d{4}-\d\d-\d\dT\S+ \[(?:INFO|WARNING|ERROR|DEBUG)\] \[\w+\]")
_ROUTER = re.compile(r"\bsglang_router(?:_rs)?\b|\bmini_lb\b|\bsgl[-_]model[-_]gateway\b")
# the router's (sgl-router / sgl-model-gateway / smg) tracing lines: tracing_subscriber's
# full format under ChronoUtc("%Y-%m-%d %H:%M:%S") with file and line on
# (``2026-03-01 10:00:00 ERROR smg::routers::http::pd_router: model_gateway/src/...rs:512: msg``;
# smg model_gateway/src/observability/logging.rs init_logging, lightseekorg/smg 73da68ca),
# or the RFC 3339 ``...T...Z`` timer of other builds; its crates' targets name it
_ROUTER_TARGET = r"(?:sglang_router(?:_rs)?|sgl_model_gateway|smg(?:_\w+)?)(?:::\w+)*"
# the spans the event is in come between the level and the target
# (``http_request{method=POST uri=/generate request_id="..."}: ``, the request middleware's)
_ROUTER_SPANS = r"(?:[\w.-]+(?:\{.*?\})?(?::[\w.-]+(?:\{.*?\})?)*: )?"
_ROUTER_TRACING = re.compile(
    r"^\s*\d{4}-\d\d-\d\d[ T]\d\d:\d\d:\d\d(?:\.\d+)?Z?\s+(?:TRACE|DEBUG|INFO|WARN|ERROR)\s+"
    + _ROUTER_SPANS
    + _ROUTER_TARGET
    + r": "
)
# the whole prefix: that, then the Rust source file and line (``model_gateway/src/x.rs:512: ``)
ROUTER_PREFIX = re.compile(_ROUTER_TRACING.pattern + r"(?:[\w./-]+\.rs:\d+: )?")
# its JSON lines (``--log-json``: the same layer's ``.json().flatten_event(true)``):
# ``{"timestamp":"...","level":"ERROR","message":"...","target":"smg::...","filename":...}``
ROUTER_JSON = re.compile(
    r'^\s*\{"timestamp":"[^"]*","level":"(?:TRACE|DEBUG|INFO|WARN|ERROR)",.*"target":"' + _ROUTER_TARGET + r'"'
)
_TRTLLM = re.compile(
    r"\[TRT-LLM\]|\[TensorRT-LLM\]|^\s*\[_torch\]|^\s*\[executor\]\[RANK|\[kv cache "
    r"manager\]|\btensorrt_llm\b|\bCacheTransceiver\b|\btrtllm-serve\b|transferAgent\.cpp"
)
_GLOG = re.compile(
    r"^\s*(?:[IWEF](?:\d{4}|\d{8})\s+\d\d:\d\d:\d\d(?:\.\d+)?\s+\d+\s+|[IWEF]\d{4}\s+|[IWEF]\s+|[IWEF]\d{4} "
    r"\d\d:\d\d:\d\d\.\d+\s+|[IWEF]\d{4} \d\d:\d\d:\d\d(?:\.\d+)?\s+\d+\s+|E\d{4} "
    r"\d\d:\d\d:\d\d\.\d+\s+)?(?P<file>[\w]+\.(?:cpp|cc|h|hpp)):\d+\]"
)
_GLOG_ANY = re.compile(r"(?P<file>\b[\w]+\.(?:cpp|cc|h|hpp)):\d+\]")
_NIXL_FILES = re.compile(
    r"^(?:nixl_\w+|backend_plugin|ucx_utils|ucx_backend|ucx_mo_backend|libfabric\w*|gpunetio\w*|mooncake_backend|posix_backend|gds_backend|obj_backend|telemetry\w*|transfer_request|nixl)\.(?:cpp|cc|h)$"
)
_MOONCAKE_FILES = re.compile(
    r"^(?:transfer_engine\w*|transfer_metadata\w*|transfer_task|rdma_\w+|tcp_transport|nvlink_transport|efa_\w+|topology|worker_pool|multi_transport|hip_transport|cxl_transport|ascend_\w+|hccl_\w+|hixl\w*|client\w*|master\w*|store_py|pybind_client|ha_helper|client_metric|client_service|segment\w*|allocator|config|common|rpc_service|http_metadata_server|endpoint_store|rpc_communicator|rpc_interface|cxi_\w+|nvmeof\w*|barex\w*|intranode_nvlink_transport|musa_transport|maca_transport|real_client\w*|master_client|"
    # yalantinglibs (coro_rpc, coro_http/cinatra, coro_io), linked by Mooncake for its RPC and HTTP servers
    r"coro_\w+|cinatra\w*|client_pool|io_context_pool)\.(?:cpp|cc|h|hpp)$"
)
_UCX = re.compile(
    r"\bUCX\s+(?:ERROR|WARN|INFO|DIAG|DEBUG|FATAL)\b|^\[\d+\.\d+\]\s+\[[^\]]*:\d+\s*:\w+\]\s+\S+\.[ch]:\d+|"
    r"\bucs_handle_error\b|\blibuc[pts](?:-[0-9a-f]+)?\.so|\b(?:uct|ucp|ucs)_\w+\(\)|\bib_mlx5_log\.c|"
    r"\bTransport retry count exceeded\b"
)
_SIGNAL = re.compile(r"\] Caught signal \d+ \(|^Caught signal \d+ \(|^==== backtrace|\bbitmap\.h:\d+\s+Assertion")
_FRAME_NATIVE = re.compile(r"^\s*\d+\s+(?:0x[0-9a-f]+\s+\S+\(\)\s+|/\S+\(|\S+\.so\S*\(|\[0x)")
_NIXL_PY = re.compile(
    r"\bNIXL "
    r"(?:INFO|WARNING|ERROR|DEBUG)\s+_api\.py:\d+|\bnixl(?:_cu1[23])?\._bindings\.nixl\w+Error\b|\bnixl\w*Error: "
    r"NIXL_ERR_\w+|^(?:Backend UCX was instantiated|Initialized NIXL agent:|Loaded plugin \w+|Using NIXL "
    r"Plugins from:|MD listener is listening)"
)
# TensorRT-LLM messages that print without its prefix (TLLM_CHECK texts, the cache
# transceiver's assertion with its C++ file)
_TRTLLM_BARE = re.compile(
    r"Disaggregated serving is not enabled|Disagg server does not currently support these "
    r"cacheState|\bcacheTransceiverConfig\b|\bcacheState\b.*(?:context|gen) executors|Assertion failed: "
    r".*\((?:\S*/)?(?:cacheTransceiver|transferAgent|dataTransceiver|cacheFormatter|baseTransBuffer|mlaCacheFormatter)\.cpp:\d+\)"
)
# NIXL messages without a glog prefix in the pasted text (the libfabric plugin's rail
# endpoint (de)serialization, the serdes key lookup)
_NIXL_BARE = re.compile(
    r"^(?:Failed to deserialize (?:data|control) rail endpoints|Deserialization of tag \w+ failed|Key \w+ not found "
    r"or has invalid length)|getPluginParams: backend '\w+' not found|No plugins available for NIXL"
)
# Dynamo hosting vLLM: its paths and the worker lines Dynamo's vLLM patch prints
_DYNAMO_HOST = re.compile(
    r"/opt/dynamo/|\bdynamo serve\b|^Dequeued prefill request|^Prefilling remotely for request|^Initializied NIXL "
    r"agent|^VllmWorker has been initialized|\badd_remote_nixl_metadata\b|\bDynamoNixlConnector\b|^Loaded "
    r"nixl metadata from engine"
)
# two words (a message, not a number or a path); from a word's start, its letters taken
# whole (a line of 8000 letters: one pass, not 8000)
_WORDS = re.compile(r"(?<![A-Za-z])[A-Za-z]{3,}+\W+[A-Za-z]{2}")
_GDB_FRAME = re.compile(r"^#\d+\s+(?:0x[0-9a-f]+ in )?\S")
_MORI = re.compile(
    r"\bmori(?:[_.-]io|io)?\b.*(?:ERROR|WARN|INFO|engine|transfer)|\[MORI\]|\bMoriKV\w+|\bmori/conn\.py|\bmori::io\b|\bControlPlaneServer::\w+|MessageType::RegEndpoint",
    re.I,
)
# xLLM: its paths and the PD block-mapping CHECK text only it prints (xllm PR #2040)
_XLLM = re.compile(r"\bxllm\b|/xllm/|remote block coverage shortage", re.I)
_LIGHTLLM = re.compile(r"\blightllm\b|--pd_trans_mode", re.I)
_TRT_HINT = re.compile(
    r"TRT|TensorRT|tensorrt|\[_torch\]|\[executor\]|kv cache manager|CacheTransceiver|trtllm|transferAgent"
)
_UCX_HINT = re.compile(r"UCX|Caught signal|====|ucs_|uct_|ucp_|libuc|ib_mlx5|Transport retry|bitmap\.h|\.c:\d")
_FAULT = re.compile(
    r"^(?:Fatal Python error: |Current thread 0x|Thread 0x[0-9a-f]+ \(most recent call first\):|!!!!!!! Segfault "
    r"encountered)"
)
_PYFRAME = re.compile(r'^\s*File "(?P<path>[^"]+)"(?:, line (?P<line>\d+))?,? in (?P<func>[\w<>.]+)')
_TB_START = re.compile(r"Traceback \(most recent call last\):")
_EXC_LINE = re.compile(r"^(?:[\w.]+\.)?(?P<type>[A-Z]\w*(?:Error|Exception|Interrupt|Exit))(?::|$)")
_SGLANG_MODULES = {
    "model_runner",
    "memory_pool",
    "scheduler",
    "common",
    "tokenizer_manager",
    "http_server",
    "conn",
    "prefill",
    "decode",
    "server_args",
    "engine_base",
    "model_loader",
    "cuda_graph_runner",
    "weight_utils",
    "detokenizer_manager",
    "bootstrap",
    "utils",
    "schedule_batch",
    "launch_server",
    "mooncake",
    "nixl",
    "mori",
}

ROLE_MARKERS = [
    # (regex, role): an explicit statement of which process a log or a section is
    (re.compile(r"disaggregation_mode='(prefill|decode)'"), None),
    (re.compile(r"--disaggregation-mode[ =]\"?(prefill|decode)\b"), None),
    (re.compile(r"^\s*#+\s*(prefill|decode)\b", re.I), None),
    (
        re.compile(
            r"^\s*(prefill|decode)(?:[ _-](?:pod|node|server|worker|instance|log|side))?\s*(?:log)?\s*:?\s*$", re.I
        ),
        None,
    ),
    (re.compile(r"\b(prefill|decode)(?:er)?\.log\b", re.I), None),
    (re.compile(r"\b(Prefill|Decode)Worker\b|\bdynamo\.(prefill|decode)\b"), None),
    (re.compile(r"\bkv_role['\"]?\s*[:=]\s*['\"]kv_(producer|consumer)"), "kv"),
]
_ROLE_FROM_MESSAGE = [
    (
        re.compile(
            r"\bPrefill (?:batch|bootstrap failed|transfer failed)\b|\bprefill bootstrap_thread died\b|\bUnexpected "
            r"transfer worker error\b|disagg_prefill|disaggregation/prefill\.py|\bPrefill instance failed to "
            r"register\b|\bFakeKVSender\b|\bprefill warmup\b"
        ),
        "prefill",
    ),
    (
        re.compile(
            r"\bDecode (?:batch|transfer "
            r"failed)\b|\bdecode_req\b|disagg_decode|disaggregation/decode\.py|\bDecodePreallocQueue\b|\bPrefilling "
            r"remotely\b"
        ),
        "decode",
    ),
    (re.compile(r"\bsglang_router(?:_rs)?::|\bsgl_model_gateway::|\bsmg::|\bmini_lb\b"), "router"),
]


@dataclass
class LineInfo:
    """One line's attribution: ``engine`` (who wrote the text), ``host`` (the process
    engine it ran in, when known), ``process`` (prefill/decode/router or ''), and
    ``kind`` (plain, traceback, frame, exception, native-frame, signal)."""

    engine: str
    host: str = ""
    process: str = ""
    kind: str = "plain"


@dataclass
class Attributor:
    """Streaming attribution with bounded state: the current traceback or crash block,
    the current role section and the engines seen so far (the log's context)."""

    role: str = ""
    block_engine: str = ""  # engine decided for the current traceback / dump block
    in_block: bool = False
    block_kind: str = ""
    seen: dict[str, int] = field(default_factory=dict)
    under_dynamo: bool = False  # the log shows Dynamo hosting the vLLM worker
    format_budget: int = 3000  # unplaced lines still matched against the projects' formats

    def context_engine(self) -> str:
        """The process engine the log shows most (sglang first among equals), or ''."""
        hosts = {
            k: v
            for k, v in self.seen.items()
            if k in ("sglang", "vllm", "vllm-ascend", "trtllm", "lmcache", "dynamo", "lightllm")
        }
        if not hosts:
            return ""
        return max(hosts, key=lambda k: (hosts[k], k == "sglang"))

    def feed(self, line: str, prefix_role: str = "") -> LineInfo:
        """Attribute one line; ``prefix_role``: the role its collector's label named
        (``sglang-decode-1 | ...``), which decides the process over the text's own hints."""
        if prefix_role:
            self.role = prefix_role
        m = _SGLANG.match(line)
        if m is not None and not self.in_block:
            rest = line[m.end() :]
            if rest.startswith(("Decode batch", "Prefill batch")):  # the bulk of a server log
                role = prefix_role or ("decode" if rest[0] == "D" else "prefill")
                self.role = role
                self.seen["sglang"] = self.seen.get("sglang", 0) + 1
                return LineInfo("sglang", host="sglang", process=role)
            if rest.startswith("INFO:") or rest.startswith("127.0.0.1 ["):
                self.seen["sglang"] = self.seen.get("sglang", 0) + 1
                return LineInfo("sglang", host="sglang", process=self.role)
        if (
            not self.under_dynamo
            and (
                "dynamo" in line
                or "Dynamo" in line
                or line.startswith(("Dequeued", "Prefilling", "Initializied", "VllmWorker", "Loaded nixl"))
            )
            and _DYNAMO_HOST.search(line)
        ):
            self.under_dynamo = True
        info = self._classify(line)
        if info.engine:
            self.seen[info.engine] = self.seen.get(info.engine, 0) + 1
        role = prefix_role or role_of_line(line)
        if role and (prefix_role or info.engine != "sglang-router"):
            # a router line interleaved with the servers' is the router's alone: the servers'
            # lines after it stay in the section they were in
            self.role = role
        info.process = prefix_role or info.process or role or self.role
        return info

    def _classify(self, line: str) -> LineInfo:
        s = line.strip()
        if not s:
            return LineInfo("")
        m = _VLLM_PROC.match(line)
        if m:
            rest = line[m.end() :]
            while True:  # nested prefixes: (Worker pid=1) (Worker_TP1 pid=2)
                m2 = _VLLM_PROC.match(rest)
                if not m2:
                    break
                rest = rest[m2.end() :]
            if _LMCACHE.search(rest):
                return LineInfo("lmcache", host="vllm")
            if _NIXL_PY.search(rest):
                return LineInfo("nixl", host="vllm")
            if "mooncake_connector" in rest or "ascend" in rest.lower():
                return LineInfo("vllm-ascend" if "ascend" in self._ascend_hint(rest) else "vllm", host="vllm")
            self._block_follow(rest, "vllm")
            return LineInfo("vllm", host="vllm", kind="traceback" if self.in_block else "plain")
        if _VLLM_LEVEL.match(s):
            self._block_follow(s, "vllm")
            return LineInfo("vllm", host="vllm")
        if "LMCache" in line or ":lmcache." in line:
            if _LMCACHE.search(line):
                return LineInfo("lmcache", host="vllm")
        sg = _SGLANG.match(line)
        if sg:
            rest = line[sg.end() :]
            self._block_follow(rest, "sglang")
            if ("router" in rest or "mini_lb" in rest or "gateway" in rest) and _ROUTER.search(rest):
                return LineInfo("sglang-router", host="sglang-router", process="router")
            return LineInfo("sglang", host="sglang")
        if _ROUTER_TRACING.match(line) or (line.lstrip().startswith('{"timestamp"') and ROUTER_JSON.match(line)):
            return LineInfo("sglang-router", host="sglang-router", process="router")
        tr = _TRACING.match(line)
        if tr:
            target = tr.group("target")
            if target.startswith("sglang_router"):
                return LineInfo("sglang-router", host="sglang-router", process="router")
            head = target.split("::")[0].split(".")[0]
            if "::" not in target and head in _SGLANG_MODULES:
                return LineInfo("sglang", host="sglang")
            return LineInfo("dynamo", host="dynamo")
        if _DYNAMO_CLI.match(line):
            return LineInfo("dynamo", host="dynamo")
        if ("router" in line or "mini_lb" in line or "gateway" in line) and _ROUTER.search(line):
            return LineInfo("sglang-router", host="sglang-router", process="router")
        if _TRT_HINT.search(line) and _TRTLLM.search(line):
            self._block_follow(line, "trtllm")
            return LineInfo("trtllm", host="trtllm")
        if (
            "isagg" in line or "cacheState" in line or "Assertion failed" in line or "cacheTransceiver" in line
        ) and _TRTLLM_BARE.search(line):
            return LineInfo("trtllm", host="trtllm")
        if (
            "eserializ" in line or "Key " in line or "getPluginParams" in line or "No plugins" in line
        ) and _NIXL_BARE.search(s):
            return LineInfo("nixl", host=self.block_engine or self.context_engine())
        g = (
            (_GLOG.match(line) or _GLOG_ANY.search(line))
            if ("pp:" in line or ".h:" in line or ".cc:" in line)
            else None
        )
        if g:
            f = g.group("file")
            if _NIXL_FILES.match(f):
                return LineInfo("nixl", host=self.block_engine or self.context_engine())
            if f.startswith("ascend_direct") and self.seen.get("vllm"):
                return LineInfo("mooncake", host="vllm-ascend")
            if _MOONCAKE_FILES.match(f):
                return LineInfo("mooncake", host=self.block_engine or self.context_engine())
            if f.startswith(("ucx", "ucp", "uct")):
                return LineInfo("ucx")
        if _UCX_HINT.search(line) and (_SIGNAL.search(line) or _UCX.search(line)):
            if "Caught signal" in line or s.startswith("===="):
                self.in_block, self.block_kind, self.block_engine = (
                    True,
                    "native",
                    self.block_engine or self.context_engine(),
                )
            return LineInfo(
                "ucx",
                host=self.block_engine or self.context_engine(),
                kind="signal" if "Caught signal" in line else "plain",
            )
        if (
            "NIXL" in line
            or "nixl" in line
            or line.startswith(("Backend ", "Initialized", "Loaded plugin", "Using NIXL", "MD listener"))
        ) and _NIXL_PY.search(line):
            return LineInfo(
                "nixl",
                host=self.block_engine or self.context_engine(),
                kind="exception" if "Error" in line else "plain",
            )
        if s.startswith(("libfabric:", "Libfabric ", "EFA internal error")) or (
            "fi_" in line and re.search(r"\b(?:libfabric|EFA internal error|prov/efa|fi_\w+\(\))", line)
        ):
            return LineInfo("libfabric", host=self.context_engine())
        if (
            "mori" in line
            or "MORI" in line
            or "Mori" in line
            or "ControlPlaneServer" in line
            or "MessageType::" in line
        ) and _MORI.search(line):
            return LineInfo("mori", host=self.context_engine())
        if ("ightllm" in line or "pd_trans_mode" in line or "LightLLM" in line) and _LIGHTLLM.search(line):
            return LineInfo("lightllm", host="lightllm")
        if s.startswith("[Orchestrator]"):  # vLLM-Omni's Prefill-Decode Orchestrator
            return LineInfo("vllm-omni", host="vllm-omni")
        if ("xllm" in line or "remote block" in line) and _XLLM.search(line):
            return LineInfo("xllm", host="xllm")
        # blocks: tracebacks, fault dumps and native frames take the engine their frames show
        if _FAULT.match(s):
            self.in_block, self.block_kind = True, "python"
            self.block_engine = ""
            return LineInfo("python", kind="signal")
        if _TB_START.search(line):
            self.in_block, self.block_kind = True, "traceback"
            self.block_engine = ""
            return LineInfo(self.context_engine(), kind="traceback")
        fr = _PYFRAME.match(line)
        if fr:
            eng = engine_of_path(fr.group("path")) or engine_of_native_frame(fr.group("func"))
            if eng and (not self.block_engine or self.block_engine in ("python", "native")):
                self.block_engine = eng
            self.in_block = True
            return LineInfo(
                eng or self.block_engine or self.context_engine() or "python",
                host=eng or self.block_engine,
                kind="frame",
            )
        if _FRAME_NATIVE.match(line) or (s.startswith("#") and _GDB_FRAME.match(s)):
            eng = engine_of_native_frame(line) or "native"
            return LineInfo(eng, host=self.block_engine or self.context_engine(), kind="native-frame")
        ex = _EXC_LINE.match(s)
        if ex and self.in_block:
            eng = self.block_engine or self.context_engine()
            self.in_block = False
            return LineInfo(eng or "", host=eng, kind="exception")
        if self.in_block and (line.startswith((" ", "\t")) or s.startswith(("^", "~"))):
            return LineInfo(self.block_engine or self.context_engine(), kind="traceback")
        return self._by_format(s)

    def _by_format(self, s: str) -> LineInfo:
        """A line no prefix places: the project whose message format it is, matched whole
        (``formats.whose``: SGLang's releases, vLLM's, NIXL's, UCX's, Mooncake's), or
        unattributed (plain text). Bounded: the first ``_FORMAT_LINES`` such lines."""
        if self.format_budget <= 0 or len(s) < 14 or not _WORDS.search(s):
            return LineInfo("")
        self.format_budget -= 1
        fm = whose(s, self.context_engine())
        if fm is None:
            return LineInfo("")
        if fm.engine == "sglang":
            return LineInfo("sglang", host="sglang" if not self.block_engine else self.block_engine)
        host = self.block_engine or self.context_engine()
        if fm.engine == "dynamo":
            return LineInfo("dynamo", host="dynamo")
        if fm.engine in ("vllm", "vllm-ascend", "lmcache"):  # a process's own message: it ran in that engine
            host = "vllm" if fm.engine == "lmcache" and not host else (host if fm.engine == "lmcache" else fm.engine)
        return LineInfo(fm.engine, host=host)

    def _ascend_hint(self, rest: str) -> str:
        return "ascend" if (self.seen.get("vllm-ascend") or "ascend" in rest.lower()) else ""

    def _block_follow(self, rest: str, engine: str) -> None:
        """A prefixed line opening or continuing a traceback keeps its engine for the block."""
        if _TB_START.search(rest):
            self.in_block, self.block_kind, self.block_engine = True, "traceback", engine
        elif self.in_block and not rest.startswith((" ", "\t")) and not _PYFRAME.match(rest):
            if _EXC_LINE.match(rest.strip()):
                self.in_block = False


def engine_of_path(path: str) -> str:
    """The engine a Python source path belongs to (``.../sglang/srt/...`` -> sglang)."""
    p = path.replace("\\", "/")
    if (
        "/sglang/srt/" in p
        or "/sglang/" in p
        and "sglang_router" not in p
        and "/sglang/python/sglang" in p
        or re.search(r"(?:^|/)sglang/(?:srt|launch_server|bench_serving|utils)\b", p)
    ):
        return "sglang"
    if "sglang_router" in p or "sgl_model_gateway" in p:
        return "sglang-router"
    if "vllm_ascend" in p:
        return "vllm-ascend"
    if re.search(r"(?:^|/)vllm/", p):
        return "vllm"
    if "tensorrt_llm" in p:
        return "trtllm"
    if "lmcache" in p:
        return "lmcache"
    if "/dynamo/" in p and "/vllm/" not in p and "/sglang/" not in p:
        return "dynamo"
    if re.search(r"(?:^|/)nixl(?:_cu1[23])?/", p):
        return "nixl"
    if "mooncake" in p:
        return "mooncake"
    if "lightllm" in p:
        return "lightllm"
    return ""


def engine_of_native_frame(text: str) -> str:
    """The library a native frame names (nixl*, ucp_/uct_/ucs_, Mooncake, CUDA)."""
    if re.search(r"\bnixl\w*|libnixl|\.nixl(?:_cu1[23])?\.mesonpy", text):
        return "nixl"
    if re.search(r"\bu(?:cp|ct|cs)_\w+|libuc[pts]", text):
        return "ucx"
    if re.search(r"mooncake|transfer_engine|TransferEngine|RdmaEndPoint", text):
        return "mooncake"
    # EFA by its provider's names only (``efa_rdm_*``, ``EfaContext``), never "efa" inside a
    # word (``_PyEval_EvalFrameDefault``)
    if re.search(r"\bfi_\w+|libfabric|\befa(?:_\w+)?\b|Efa[A-Z]\w*", text):
        return "libfabric"
    return ""


_ROLE_HINT = re.compile(
    r"refill|ecode|kv_role|router|gateway|smg::|mini_lb|FakeKV|PrefillWorker|DecodeWorker|DecodePrealloc"
)


def role_of_line(line: str) -> str:
    """The process a line names itself (a server-args dump, a ``# prefill pod`` heading,
    a message only one role prints), or ''."""
    if not _ROLE_HINT.search(line):
        return ""
    for rx, kind in ROLE_MARKERS:
        m = rx.search(line)
        if m:
            val = next((g for g in m.groups() if g), "").lower()
            if kind == "kv":
                return "prefill" if val == "producer" else "decode"
            return val
    for rx, role in _ROLE_FROM_MESSAGE:
        if rx.search(line):
            return role
    return ""
