"""What an on-call engineer types first: a log piped to ``explain -``, a log's path given
as the message, a lone ``Killed``, a UCX backtrace printed without symbol resolution.
The logs are our own, written in the formats the runtimes print (SGLang 0.5.23's
``try_ensure_parallel_info`` in ``disaggregation/common/conn.py``, its launcher's SIGQUIT
teardown, UCX's ``==== backtrace`` of glibc's ``backtrace_symbols``)."""

from __future__ import annotations

import json
import subprocess
import sys

from helpers import REPO

from kvcheck.explain.rulebase import demangle_names

# SGLang 0.5.23 common/conn.py try_ensure_parallel_info: "Page size mismatch: prefill
# server has page_size={info.page_size}, but decode server has page_size={...}. Both
# servers must use the same --page-size value.", raised in the decode's scheduler
PAGE_LOG = """\
[2026-03-02 10:00:05 TP0] Scheduler hit an exception: Traceback (most recent call last):
  File "/sgl-workspace/sglang/python/sglang/srt/disaggregation/common/conn.py", line 1321, in try_ensure_parallel_info
    raise RuntimeError(
RuntimeError: Page size mismatch: prefill server has page_size=32, but decode server has page_size=16. Both servers must use the same --page-size value.
"""


def _explain(*args: str, stdin: str | None = None) -> subprocess.CompletedProcess:
    return subprocess.run(
        [sys.executable, "-m", "kvcheck", "explain", *args],
        input=stdin,
        capture_output=True,
        text=True,
        cwd=REPO,
        timeout=60,
    )


def _ids(proc: subprocess.CompletedProcess) -> tuple[list[str], str]:
    rep = json.loads(proc.stdout)["report"]
    return [f["id"] for f in rep["findings"]], (rep["first_cause"] or {}).get("id", "")


def test_a_dash_reads_stdin_and_a_path_reads_the_file_as_the_log(tmp_path):
    """``cat log | kvcheck explain -`` and ``kvcheck explain decode.log`` were read as the
    one-word messages "-" and "decode.log": "not recognized", exit 1."""
    log = tmp_path / "decode.log"
    log.write_text(PAGE_LOG)
    by_stdin = _explain("-", "-o", "json", stdin=PAGE_LOG)
    by_path = _explain(str(log), "-o", "json")
    by_log = _explain("--log", str(log), "-o", "json")
    for proc in (by_stdin, by_path, by_log):
        assert proc.returncode == 0, proc.stdout + proc.stderr
        ids, first = _ids(proc)
        assert first == "page-size-mismatch", ids
    hit = next(h for h in json.loads(by_path.stdout)["hits"] if h["entry_id"] == "page-size-mismatch")
    assert (hit["values"]["prefill"], hit["values"]["decode"]) == ("32", "16")
    assert f"reading it as --log {log}" in by_path.stderr
    # a message that is no file stays a message
    proc = _explain("no-such-file.log")
    assert proc.returncode == 1 and "reading it as --log" not in proc.stderr


def test_a_lone_killed_is_sigkill_and_follows_sglangs_own_teardown(tmp_path):
    """A shell prints ``Killed`` for a SIGKILLed job: alone it was "not recognized". SGLang
    0.5.23's launcher SIGKILLs its own tree after a child fails
    (launch_phase_sigquit_handler -> kill_process_tree), so after a traceback it is a
    consequence, never the first cause."""
    proc = _explain("--log", "-", "-o", "json", stdin="Killed\n")
    assert proc.returncode == 0, proc.stdout + proc.stderr
    assert _ids(proc) == (["process-killed"], "process-killed")
    teardown = (
        PAGE_LOG + "[2026-03-02 10:00:05] Received sigquit from a child process. It usually means the child failed.\n"
        "Killed\n"
    )
    ids, first = _ids(_explain("-", "-o", "json", stdin=teardown))
    assert first == "page-size-mismatch" and "process-killed" in ids
    oom = "[Mon Mar  2 10:00:05 2026] Out of memory: Killed process 4242 (python3) total-vm:81234567kB\n"
    assert _ids(_explain("-", "-o", "json", stdin=oom))[1] == "process-oom-killed"


def test_mangled_frames_are_read_as_their_names():
    """glibc's backtrace_symbols (UCX's backtrace without BFD) prints C++ frames mangled."""
    assert demangle_names("libplugin_UCX.so(_ZN19nixlUcxSharedThread3runEv+0x8e) [0x7f]") == (
        "libplugin_UCX.so(nixlUcxSharedThread::run+0x8e) [0x7f]"
    )
    assert demangle_names("_ZNK13nixlUcxWorker3armEv") == "nixlUcxWorker::arm"
    assert demangle_names("_ZN4ucxx6WorkerC2Ev _ZN3foo3BarD1Ev") == "ucxx::Worker::Worker foo::Bar::~Bar"
    # templates and substitutions are left as printed
    assert demangle_names("_ZNSt6thread11_State_implINS_8_InvokerEEE6_M_runEv").startswith("_ZNSt6thread")


def test_a_ucx_backtrace_without_symbols_names_the_progress_thread_crash():
    """UCX's "Caught signal 11" header and a backtrace whose NIXL frame is mangled: the
    progress-thread segfault (ai-dynamo/nixl#2102) is the first cause, and UCX's header read
    by its format no longer stands before the stack that names where it died."""
    log = (
        "[1765028211.512344] [node-7:1123 :0]   debug.c:1340 UCX  ERROR Caught signal 11 (Segmentation fault: "
        "address not mapped to object at address 0x18)\n"
        "==== backtrace (tid:   1198) ====\n"
        " 0  /opt/nixl/lib/libucs.so.0(ucs_handle_error+0x2e4) [0x7f3a1c2e7ba4]\n"
        " 1  /lib/x86_64-linux-gnu/libc.so.6(+0x42520) [0x7f3a3fa42520]\n"
        " 2  /opt/nixl/lib/libucp.so.0(ucp_worker_arm+0x1a) [0x7f3a1c3b1aba]\n"
        " 3  /opt/nixl/lib/plugins/libplugin_UCX.so(_ZN19nixlUcxSharedThread3runEv+0x8e) [0x7f3a1c48a21e]\n"
        "=================================\n"
    )
    ids, first = _ids(_explain("-", "-o", "json", stdin=log))
    assert first == "nixl-progress-thread-no-cuda-context", ids
    assert "ucx-error-log-generic" not in ids
    other = log.replace("ucp_worker_arm", "ucp_rkey_unpack").replace(
        "_ZN19nixlUcxSharedThread3runEv", "_ZN14nixlUcxEngine12loadRemoteMDEv"
    )
    ids, first = _ids(_explain("-", "-o", "json", stdin=other))
    assert first == "native-crash-generic" and "ucx-error-log-generic" not in ids, ids


def test_one_text_under_two_field_names_fits_the_releases_of_both():
    """SGLang 0.5.23's try_ensure_parallel_info formats "KV cache dtype mismatch: prefill
    server has kv_cache_dtype={...}, but decode server has kv_cache_dtype={...}. Both
    servers must use the same --kv-cache-dtype value." from ``self.kv_cache_dtype_str``;
    earlier releases from ``self.kv_cache_dtype``. The printed text is the same, so a line
    of 0.5.23 was narrowed to 0.5.10 .. 0.5.16 (the other row) and explained against 0.5.16."""
    from kvcheck.explain.formats import load_formats

    text = (
        "KV cache dtype mismatch: prefill server has kv_cache_dtype=fp8_e4m3, but decode server has "
        "kv_cache_dtype=auto. Both servers must use the same --kv-cache-dtype value."
    )
    got = load_formats().match(text)
    assert got is not None and got.function == "CommonKVManager.try_ensure_parallel_info"
    assert {"0.5.10", "0.5.16", "0.5.23"} <= set(got.releases)
    proc = _explain("-", "-o", "json", stdin="RuntimeError: " + text + "\n")
    assert json.loads(proc.stdout)["release"] == "0.5.23"


def test_mooncake_registration_failure_names_no_side_the_log_does_not_show():
    """SGLang 0.5.23's MooncakeKVManager.__init__ registers the KV buffers
    (register_buffer_to_engine) before it branches on the disaggregation mode: prefill and
    decode both register, so a bare transfer-engine line was wrongly said to be the
    prefill's. A pod name that says decode still places it."""
    line = "E1206 14:30:02.118822 44102 rdma_transport.cpp:392] Failed to register memory 0x7f2c00000000: Bad address [14]\n"
    first = json.loads(_explain("-", "-o", "json", stdin=line).stdout)["report"]["first_cause"]
    assert (first["id"], first["process"], first["phase"]) == ("mooncake-gpu-memory-registration", "", "startup")
    pod = "[pod/llama-decode-0/sglang] "
    log = pod + "[2026-12-06 14:30:00 TP0] Load weight end. type=LlamaForCausalLM\n" + pod + line
    first = json.loads(_explain("-", "-o", "json", stdin=log).stdout)["report"]["first_cause"]
    assert (first["id"], first["process"]) == ("mooncake-gpu-memory-registration", "decode")


def test_json_spelled_as_other_tools_spell_it_names_the_option():
    """``--json`` was click's bare "No such option: --json"; it is exit 2 naming -o json."""
    proc = _explain("--json", "-", stdin=PAGE_LOG)
    assert proc.returncode == 2 and "use -o json" in proc.stderr and proc.stdout == ""
