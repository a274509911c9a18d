"""The same log pasted the way people paste it gets the same answer (issue 20): taken
with ``kubectl logs --prefix/--timestamps``, ``docker compose logs``, docker's json-file
driver, a log shipper's JSON export, ``journalctl``, ``srun --label`` (one task or two
interleaved), under Ray's worker prefix, with ANSI colours or CRLF, quoted or fenced on
GitHub, hard-wrapped by a terminal, numbered by ``cat -n`` or indented, ``explain`` names
the same first cause, engine and phase as on the plain excerpt (``prefixes.Paste``).

The excerpts are written here in the formats the projects print (SGLang's ``[time TPn]``
prefix and its catalog message, a Python fault dump of NIXL's progress thread, UCX's
signal handler, Mooncake's glog lines, vLLM's worker prefix); no collected log is pasted.
The shapes are re-made here, each as its collector writes it; ``benchmarks/paste_shapes.py``
measures them on the real logs.
"""

from __future__ import annotations

import json

import pytest

from kvcheck.explain import explain_text
from kvcheck.explain.prefixes import Paste

T = "[2026-03-02 10:00:{s:02d} TP0] "

PAGE_SIZE = (
    "[2026-03-02 10:00:00] server_args=ServerArgs(model_path='m', disaggregation_mode='decode', page_size=64)\n"
    + T.format(s=1)
    + "Load weight end. type=LlamaForCausalLM, dtype=torch.bfloat16, avail mem=60.12 GB, mem usage=14.96 GB.\n"
    + T.format(s=2)
    + "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/disaggregation/common/conn.py", line 1, in '
    "try_ensure_parallel_info\n"
    "RuntimeError: Page size mismatch: prefill server has page_size=32, but decode server has page_size=64. Both "
    "servers must use the same --page-size value.\n"
)
PROGRESS_THREAD = (
    "[2026-03-02 10:00:00] server_args=ServerArgs(model_path='m', disaggregation_mode='prefill')\n"
    "[2026-03-02 10:00:02] The server is fired up and ready to roll!\n"
    '[2026-03-02 10:00:03] INFO:     10.0.0.1:4000 - "POST /generate HTTP/1.1" 200 OK\n'
    + T.format(s=4)
    + "Prefill batch. #new-seq: 1, #new-token: 40, #cached-token: 0, token usage: 0.00, #running-req: 0\n"
    "Fatal Python error: Segmentation fault\n"
    '  File "<unknown>", line 0, in cuEventQuery\n'
    '  File "<unknown>", line 0, in uct_cuda_base_iface_event_fd_arm\n'
    '  File "<unknown>", line 0, in ucp_worker_arm\n'
    '  File "<unknown>", line 0, in nixlUcxSharedThread::run()\n'
)
UCX_TCP = (
    '[2026-03-02 10:00:03] 127.0.0.1 [02/Mar/2026:10:00:03 +0000] "GET /route?engine_rank=0 HTTP/1.1" 200 262 "-" '
    '"python-requests/2.32"\n'
    "[node-1:12796:1:13303] Caught signal 11 (Segmentation fault: invalid permissions for mapped object at address "
    "0x7f00)\n"
    "==== backtrace (tid:  13303) ====\n"
    " 0  /usr/lib/python3/site-packages/.nixl.mesonpy.libs/nixl.libs/libucs-1.so.0.0.0(ucs_handle_error+0x294) "
    "[0x7f01]\n"
    " 1  /usr/lib/x86_64-linux-gnu/libc.so.6(+0x1a07cd) [0x7f02]\n"
    " 2  /usr/lib/python3/site-packages/.nixl.mesonpy.libs/nixl.libs/libuct-2.so.0.0.0(uct_tcp_ep_am_bcopy+0x8a) "
    "[0x7f03]\n"
)
MOONCAKE = (
    "E0501 10:00:01.123456  4242 rdma_endpoint.cpp:472] Invalid argument: received packet mismatch, "
    "local.local_nic_path: 10.0.0.1:1@rdma0, local.peer_nic_path: 10.0.0.1:2@rdma2\n"
    "E0501 10:00:01.223456  4242 rdma_endpoint.cpp:1033] [Handshake] Failed to modify QP to RTR, check mtu, gid, "
    "peer lid, peer qp num: Connection timed out [110]\n"
)
CHUNK_CACHE = (
    T.format(s=1) + "Decode batch. #running-req: 4, #token: 2048, token usage: 0.02, gen throughput (token/s): 310.55, "
    "#queue-req: 0\n" + T.format(s=2) + "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2911, in '
    "run_scheduler_process\n"
    "    scheduler.event_loop_overlap_disagg_decode()\n"
    "AttributeError: 'ChunkCache' object has no attribute 'release_aborted_request'\n"
)
VLLM = (
    "(EngineCore_DP0 pid=4700) INFO 03-02 10:00:00 [core.py:93] Initializing a V1 LLM engine (v0.11.0) with config: "
    "model='m', speculative_config=None, tokenizer='m'\n"
    "(Worker_DP0_EP0 pid=4711) ERROR 03-02 10:00:01 [nixl_connector.py:815] RuntimeError: NIXL transfer failed for "
    "request cmpl-1: NIXL_ERR_BACKEND\n"
)
EXCERPTS = {
    "chunk-cache": CHUNK_CACHE,
    "vllm": VLLM,
    "page-size": PAGE_SIZE,
    "progress-thread": PROGRESS_THREAD,
    "ucx-tcp": UCX_TCP,
    "mooncake": MOONCAKE,
}
# the plain excerpts' answers, from the catalog and the signatures (first cause, engine, phase)
PLAIN = {
    "chunk-cache": ("pd-decode-offload-abort-chunkcache", "sglang", "serving"),
    "vllm": ("nixl-status-generic", "nixl", ""),
    "page-size": ("page-size-mismatch", "sglang", "first-request"),
    "progress-thread": ("nixl-progress-thread-no-cuda-context", "nixl", "serving"),
    "ucx-tcp": ("ucx-tcp-device-memory", "ucx", "first-transfer"),
    "mooncake": ("mooncake-nic-cross-device", "mooncake", "first-transfer"),
}


def _each(text: str, f) -> str:
    return "\n".join(f(i, ln) for i, ln in enumerate(text.split("\n")))


def _wrap(text: str, width: int) -> str:
    out = []
    for ln in text.split("\n"):
        out += [ln[i : i + width] for i in range(0, len(ln), width)] or [""]
    return "\n".join(out)


def _two_tasks(text: str) -> str:
    lines = text.split("\n")
    out = []
    for i, ln in enumerate(lines):
        out += [f"0: {ln}"] + ([f"1: {lines[i - 1]}"] if i else [])
    return "\n".join(out + [f"1: {lines[-1]}"])


SHAPES = {
    "kubectl-prefix": lambda t: _each(t, lambda i, ln: f"[pod/llm-0/server] {ln}"),
    "kubectl-timestamps": lambda t: _each(t, lambda i, ln: f"2026-03-02T10:00:{i:02d}.123456789Z {ln}"),
    "compose": lambda t: _each(t, lambda i, ln: f"server-1  | {ln}"),
    "docker-json": lambda t: _each(
        t, lambda i, ln: json.dumps({"log": ln + "\n", "stream": "stderr", "time": f"2026-03-02T10:00:{i:02d}Z"})
    ),
    "json-message": lambda t: _each(
        t, lambda i, ln: json.dumps({"timestamp": i, "message": ln, "kubernetes": {"pod_name": "llm-0"}})
    ),
    "cloudwatch": lambda t: json.dumps(
        {"events": [{"timestamp": i, "message": ln} for i, ln in enumerate(t.split("\n"))]}, indent=2
    ),
    "journald": lambda t: _each(t, lambda i, ln: f"Mar 02 10:00:{i:02d} gpu-3 python3[1234]: {ln}"),
    "srun-l": lambda t: _each(t, lambda i, ln: f"0: {ln}"),
    "srun-two-tasks": _two_tasks,
    "ray": lambda t: _each(t, lambda i, ln: f"(RayWorkerWrapper pid=123, ip=10.0.0.1) {ln}"),
    "ansi": lambda t: _each(t, lambda i, ln: f"\x1b[32m{ln}\x1b[0m"),
    "crlf": lambda t: t.replace("\n", "\r\n"),
    "github-quote": lambda t: _each(t, lambda i, ln: f"> {ln}" if ln else ">"),
    "fenced": lambda t: f"```log\n{t}```\n",
    "wrap80": lambda t: _wrap(t, 80),
    "cat-n": lambda t: _each(t, lambda i, ln: f"{i + 1:6d}\t{ln}"),
    "indent": lambda t: _each(t, lambda i, ln: f"    {ln}" if ln else ln),
}


def _answer(text: str):
    rep = explain_text(text, source="log").report
    f = rep.first_cause
    return (f.id, f.engine, f.phase) if f is not None else None, {e.engine for e in rep.engines}


def test_the_plain_excerpts_answers():
    for name, text in EXCERPTS.items():
        assert _answer(text)[0] == PLAIN[name], name
    assert _answer(VLLM)[1] == {"vllm"}


@pytest.mark.parametrize("shape", sorted(SHAPES))
def test_each_shape_gets_the_plain_excerpts_answer(shape):
    for name, text in EXCERPTS.items():
        pasted = SHAPES[shape](text)
        assert pasted != text
        assert _answer(pasted) == _answer(text), (shape, name)  # the first cause and every engine named


def test_the_pod_or_service_name_says_the_process():
    text = _each(PAGE_SIZE, lambda i, ln: f"[pod/sglang-decode-0/server] {ln}")
    rep = explain_text(text, source="log").report
    assert rep.first_cause.process == "decode"
    shipped = _each(PROGRESS_THREAD, lambda i, ln: json.dumps({"log": ln, "kubernetes": {"pod_name": "llm-prefill-1"}}))
    assert set(explain_text(shipped, source="log").report.engines[0].processes) == {"prefill"}
    unit = _each(PAGE_SIZE, lambda i, ln: f"Mar 02 10:00:{i:02d} gpu-3 sglang-decode.service[42]: {ln}")
    assert explain_text(unit, source="log").report.first_cause.process == "decode"
    actor = _each(PAGE_SIZE, lambda i, ln: f"(DecodeWorker pid=42, ip=10.0.0.2) {ln}")
    assert explain_text(actor, source="log").report.first_cause.process == "decode"


MERGE_BATCH = (
    T.format(s=1) + "Scheduler hit an exception: Traceback (most recent call last):\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/scheduler.py", line 2911, in event_loop\n'
    "    self.running_batch.merge_batch(self.last_batch)\n"
    '  File "/usr/local/lib/python3.12/dist-packages/sglang/srt/managers/schedule_batch.py", line 1520, in '
    "merge_batch\n"
    "    self.multimodal_inputs.extend(other.multimodal_inputs)\n"
    "AttributeError: 'NoneType' object has no attribute 'extend'\n"
)


def test_two_pods_interleaved_are_read_pod_by_pod():
    # the decode's traceback cut line by line by the prefill's lines: read whole, on the decode
    dec = MERGE_BATCH.rstrip("\n").split("\n")
    pre = [T.format(s=i) + f"Prefill batch. #new-seq: 1, #new-token: {i}" for i in range(len(dec))]
    text = "\n".join(
        x for d, p in zip(dec, pre, strict=True) for x in (f"[pod/pd-decode-0/s] {d}", f"[pod/pd-prefill-0/s] {p}")
    )
    f = explain_text(text, source="log").report.first_cause
    assert (f.id, f.process) == ("pd-decode-multimodal-inputs-none", "decode")
    plain = explain_text(MERGE_BATCH, source="log").report.first_cause
    assert plain.id == "pd-decode-multimodal-inputs-none"
    # its line numbers are the paste's: the decode's n-th line is the paste's (2n-1)-th
    assert (f.first_line, f.last_line) == (2 * plain.first_line - 1, 2 * plain.last_line - 1)


def test_line_numbers_are_the_pastes():
    plain = explain_text(PAGE_SIZE, source="log")
    f = plain.report.first_cause
    line = PAGE_SIZE.split("\n")[f.first_line - 1]
    for shape in ("fenced", "wrap80", "cloudwatch", "srun-two-tasks", "json-message"):
        pasted = SHAPES[shape](PAGE_SIZE)
        got = explain_text(pasted, source="log")
        g = got.report.first_cause
        assert g.id == f.id and got.hits[0].entry_id == f.id, shape
        at = pasted.split("\n")[g.first_line - 1]
        assert line[:40] in at or (shape == "cloudwatch" and json.dumps(line[:40])[1:-1] in at), (shape, at)
        assert got.hits[0].first_line == g.first_line, shape


def test_the_answer_does_not_depend_on_where_the_blocks_are_cut():
    import io

    from kvcheck.explain.matcher import explain_blocks
    from kvcheck.explain.scan import iter_log_blocks

    filler = "".join(T.format(s=0) + f"Prefill batch. #new-seq: 1, #new-token: {i}\n" for i in range(300))
    for shape in ("wrap80", "docker-json", "cloudwatch", "srun-two-tasks", "fenced"):
        text = SHAPES[shape](filler + PAGE_SIZE + filler)
        whole = [(h.entry_id, h.first_line, h.last_line) for h in explain_text(text, source="log").hits]
        cut = explain_blocks(iter_log_blocks(io.BytesIO(text.encode()), block=997), source="log")
        assert whole and [(h.entry_id, h.first_line, h.last_line) for h in cut.hits] == whole, shape


def test_an_applications_own_json_line_is_not_taken_for_a_shippers():
    line = json.dumps({"level": "error", "msg": "create failed", "error": "is forbidden: User cannot create resource"})
    assert Paste().block([line])[0] == [line]
    # docker's json-file, journalctl -o json, Vector's docker source, Google Cloud Logging
    for shipped in (
        {"log": "E0501 x.cpp:1] boom\n", "stream": "stderr", "time": "2026-03-02T10:00:00Z"},
        {
            "__CURSOR": "s=1",
            "_PID": "42",
            "_COMM": "python3",
            "_SYSTEMD_UNIT": "sglang.service",
            "PRIORITY": "3",
            "SYSLOG_IDENTIFIER": "python3",
            "MESSAGE": "E0501 x.cpp:1] boom",
        },
        {
            "message": "E0501 x.cpp:1] boom",
            "container_name": "c",
            "image": "i",
            "label": {},
            "source_type": "docker_logs",
            "stream": "stderr",
            "timestamp": "2026-03-02T10:00:00Z",
        },
        {
            "textPayload": "E0501 x.cpp:1] boom",
            "resource": {"type": "k8s_container"},
            "severity": "ERROR",
            "logName": "projects/p/logs/stderr",
            "insertId": "1",
            "receiveTimestamp": "2026-03-02T10:00:00Z",
        },
    ):
        assert Paste().block([json.dumps(shipped)])[0] == ["E0501 x.cpp:1] boom"], shipped


def test_a_line_nested_past_the_json_parsers_depth_is_read_as_text():
    deep = '{"log": ' + "[" * 100_000 + "]" * 100_000 + "}"
    assert Paste().block([deep])[0] == [deep]


def test_lines_of_one_width_are_not_taken_for_a_hard_wrap():
    # a terminal UI's frame pads every line to its width; the same message with other
    # numbers, or a line that happens to be 80 wide before a line of the same format
    framed = [f"│ {T.format(s=i)}Prefill batch. #new-seq: {i}".ljust(78) + " │" for i in range(5)]
    assert len(Paste().block(framed)[0]) == 5
    same = [
        f"E0501 10:00:0{i}.000000  42 conn.cpp:1] transfer to 10.0.0.{i}:17000 failed, status {i}" for i in range(5)
    ]
    assert Paste().block(same)[0] == same
    eighty = "E0501 10:00:01.0000  42 rdma_endpoint.cpp:385] Failed to modify QP to RTR, check"
    assert len(eighty) == 80
    assert Paste().block([eighty, "E0501 10:00:02.000000  42 rdma_endpoint.cpp:385] next"])[0][0] == eighty
    # a terminal's cut inside a word, or at one space, is joined
    assert Paste().block([eighty, "s mtu", "E0501 x"])[0][0] == eighty + "s mtu"
    assert Paste().block([eighty, " mtu, gid", "E0501 x"])[0][0] == eighty + " mtu, gid"
