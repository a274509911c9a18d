"""kvcheck explain's general rules (issue 20, generalization): a failure line no specific
signature knows is still explained by its kind: a Python traceback by its exception type
and the innermost frame's module (mapped to SGLang's subsystem), a native error line by its
source file and status, an RDMA registration by its errno, a work completion by its status,
a plugin by the library it misses, a peer address by its form.

Excerpts are written here in each library's format (rewritten, no collected log). Values
come from the runtime where it runs on CPU: the installed SGLang's source files and line
numbers, the installed NIXL's exception classes and its own TypeError, os.strerror.
"""

from __future__ import annotations

import importlib.util
import inspect
import os
import re
from pathlib import Path

import pytest

from kvcheck.explain import explain_text
from kvcheck.explain.generic import rules, sglang_subsystem
from kvcheck.explain.signatures import load_signatures


def _report(text: str):
    return explain_text(text, source="log").report


def _sglang_root() -> Path:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.submodule_search_locations
    return Path(list(spec.submodule_search_locations)[0])


def _def_line(path: Path, func: str) -> int:
    for n, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
        if re.match(rf"\s*def {func}\(", line):
            return n
    raise AssertionError(f"{func} not in {path}")


def test_an_sglang_traceback_is_read_by_exception_type_and_the_subsystem_of_its_frame():
    """A traceback nothing specific knows: the frame is a real function of the installed
    SGLang's PD decode queue; the failure is located there, with the serving phase the
    decode's own batch line shows, and ranks above the scheduler's wrapper line."""
    decode = _sglang_root() / "srt" / "disaggregation" / "decode.py"
    n = _def_line(decode, "pop_preallocated")
    text = (
        "[2026-01-02 03:04:05 TP0] Decode batch, #running-req: 2, #token: 900, token usage: 0.01, gen throughput (token/s): 41.20, #queue-req: 0\n"
        "[2026-01-02 03:04:06 TP0] Scheduler hit an exception: Traceback (most recent call last):\n"
        f'  File "{decode}", line {n + 3}, in pop_preallocated\n'
        "    x = req.widget\n"
        "AttributeError: 'DecodeRequest' object has no attribute 'widget'\n"
    )
    f = _report(text).first_cause
    assert (f.id, f.kind, f.engine, f.phase) == ("python-exception-generic", "generic", "sglang", "serving")
    assert "PD decode queues" in f.values["component"] and "pop_preallocated" in f.cause
    assert "code-level mismatch" in f.cause and f.checks


@pytest.mark.parametrize("rel, expect", [
    ("srt/disaggregation/nixl/conn.py", "nixl KV transfer backend"),
    ("srt/disaggregation/mooncake/conn.py", "mooncake KV transfer backend"),
    ("srt/disaggregation/prefill.py", "PD prefill queues"),
    ("srt/managers/scheduler.py", "the scheduler"),
    ("srt/mem_cache/memory_pool.py", "KV cache pools"),
])
def test_subsystems_are_those_of_modules_the_installed_sglang_has(rel, expect):
    path = _sglang_root() / rel
    assert path.is_file(), rel  # the map names SGLang's real modules
    assert expect in sglang_subsystem(str(path))


def test_a_call_into_nixl_with_an_argument_it_lacks_is_a_version_mismatch(monkeypatch):
    """NIXL's own TypeError (the installed nixl_agent_config refusing an argument): the
    specific signature names it; without it (leave-out hook) the general rule does."""
    from nixl_cu12._api import nixl_agent_config

    with pytest.raises(TypeError) as ei:
        nixl_agent_config(num_workers_x=4)
    text = f"TypeError: {ei.value}\n"
    assert _report(text).first_cause.id == "nixl-too-old-for-engine"
    load_signatures.cache_clear()
    try:
        monkeypatch.setenv("KVCHECK_EXPLAIN_DISABLE", "nixl-too-old-for-engine")
        f = _report(text).first_cause
    finally:
        monkeypatch.delenv("KVCHECK_EXPLAIN_DISABLE")
        load_signatures.cache_clear()
    assert f.id == "api-version-mismatch" and "nixl" in f.cause and "num_workers_x" in f.cause


def test_an_internal_signature_bug_is_not_called_a_version_mismatch():
    text = ("Traceback (most recent call last):\n"
            '  File "/usr/lib/python3/site-packages/sglang/srt/disaggregation/prefill.py", line 10, in send_kv_chunk\n'
            "    req.sender.send(idx)\n"
            "TypeError: WidgetSender.send() missing 1 required positional argument: 'last'\n")
    f = _report(text).first_cause
    assert f.id == "python-exception-generic"


def test_every_nixl_error_class_of_the_installed_bindings_has_a_meaning():
    import nixl_cu12._bindings as b

    names = [n for n in dir(b) if n.startswith("nixl") and n.endswith("Error")]
    assert len(names) >= 10
    table = rules()["nixl_status"]
    for n in names:
        code = "NIXL_ERR_" + re.sub(r"(?<!^)(?=[A-Z])", "_", n[4:-5]).upper().replace("CANCELLED", "CANCELED")
        assert code in table, code


def test_a_nixl_status_in_a_traceback_names_the_api_step():
    text = ("Traceback (most recent call last):\n"
            '  File "/x/site-packages/widgetengine/kv.py", line 3, in connect\n'
            "    agent.add_remote_agent(md)\n"
            '  File "/x/site-packages/nixl_cu12/_api.py", line 9, in add_remote_agent\n'
            "nixl_cu12._bindings.nixlNotFoundError: NIXL_ERR_NOT_FOUND\n")
    f = _report(text).first_cause
    assert (f.id, f.engine, f.phase) == ("nixl-status-generic", "nixl", "first-transfer")
    assert "metadata exchange" in f.title and "remote agent" in f.cause


@pytest.mark.parametrize("errno_, fid, fmt", [
    (12, "rdma-register-enomem", "glog"), (1, "rdma-register-eperm", "glog"), (14, "rdma-register-gpu-memory", "ucx")])
def test_a_registration_errno_names_its_cause_class(errno_, fid, fmt):
    if fmt == "glog":  # Mooncake's rdma_context.cpp format
        line = f"E0102 03:04:05.000001  4242 rdma_context.cpp:250] Failed to register memory 0x7f00aa000000: {os.strerror(errno_)} [{errno_}]\n"
    else:  # UCX's ib_md.c format
        line = f"[1700000000.1] [hostx:11:0]  ib_md.c:300 UCX  ERROR ibv_reg_mr(address=0x7f00aa000000, length=4096, access=0xf) failed: {os.strerror(errno_)}\n"
    f = _report(line).first_cause
    assert (f.id, f.phase) == (fid, "startup") and f.fix


def test_a_specific_signature_still_wins_over_the_errno_rule():
    text = ("E0102 03:04:05.000001  4242 rdma_context.cpp:203] Failed to register memory 0x7b0000000000: Invalid argument [22]\n"
            "[2026-01-02 03:04:05 TP3] Mooncake memory registration failed.\n")
    assert _report(text).first_cause.id == "mooncake-gpu-memory-registration"


def test_rdma_completion_status_names_the_nic_path_and_a_flush_is_a_consequence():
    text = ("ionic_comp:1277: cqe with error 12 for qp 0x11 (local_nic: rdma3)\n"
            "[1700000000.2] [hostx:11:0]     ib_log.c:100 UCX  ERROR  completion on qp 0x11 failed: Work Request Flushed Error\n")
    rep = _report(text)
    assert rep.first_cause.id == "rdma-wc-retry-exc-err" and "rdma3" in rep.first_cause.cause
    flush = next(f for f in rep.findings if f.id == "rdma-wc-wr-flush-err")
    assert flush.role == "consequence"


def test_a_plugin_missing_its_library_and_devices_not_visible():
    f = _report("E0101 00:00:01.5 9 nixl_plugin_manager.cpp:120] Failed to load plugin from /opt/p/libplugin_WIDGET.so: libcudart.so.12: cannot open shared object file: No such file or directory\n").first_cause
    assert f.id == "native-plugin-missing-library" and "CUDA" in f.cause
    f = _report("W0101 00:00:01.0 9 topology.cpp:50] Device path /dev/infiniband/mlx5_7 does not exist\n").first_cause
    assert f.id == "rdma-devices-not-visible" and "uverbs" in f.cause


@pytest.mark.parametrize("addr, hit", [("fd00:1:2:3:4:5:6:7:15001", True), ("[fd00:1:2:3:4:5:6:7]:15001", False), ("10.1.2.3:15001", False)])
def test_only_an_unbracketed_ipv6_peer_address_is_blamed(addr, hit):
    rep = _report(f"E0101 00:00:02.0 9 transfer_metadata_plugin.cpp:900] handshake: failed to reach peer server {addr}: Connection refused [111]\n")
    assert any(f.id == "peer-address-ipv6-literal" for f in rep.findings) is hit


def test_a_native_line_without_signature_is_located_with_its_status_meaning():
    rep = _report("[1700000000.1] [hostx:11:0]       wireup.c:1000 UCX  ERROR   no transport to reach the peer: Destination is unreachable\n")
    f = rep.first_cause
    assert (f.id, f.engine, f.phase) == ("native-error-generic", "ucx", "first-transfer")
    assert "UCS_ERR_UNREACHABLE" in f.cause
    f = _report("E0101 00:00:03.0 9 rdma_endpoint.cpp:300] widget handshake rejected by the peer\n").first_cause
    assert (f.engine, f.phase) == ("mooncake", "first-transfer") and "QP handshake" in f.values["component"]


def test_another_engines_traceback_is_its_own_never_sglangs():
    text = ("(Worker_TP0 pid=5) ERROR 01-02 03:04:05 [worker.py:1] Traceback (most recent call last):\n"
            '(Worker_TP0 pid=5) ERROR 01-02 03:04:05 [worker.py:1]   File "/opt/venv/lib/python3.12/site-packages/vllm/distributed/widget.py", line 7, in step\n'
            "(Worker_TP0 pid=5) ERROR 01-02 03:04:05 [worker.py:1]     self.table[rid]\n"
            "(Worker_TP0 pid=5) ERROR 01-02 03:04:05 [worker.py:1] KeyError: 'req-1'\n")
    rep = _report(text)
    assert rep.first_cause.engine == "vllm"
    assert not [f for f in rep.findings if f.kind == "catalog" and f.engine == "sglang"]


def test_the_disable_hook_leaves_signatures_out(monkeypatch):
    some = load_signatures()[0].id
    load_signatures.cache_clear()
    try:
        monkeypatch.setenv("KVCHECK_EXPLAIN_DISABLE", some)
        assert some not in {s.id for s in load_signatures()}
    finally:
        monkeypatch.delenv("KVCHECK_EXPLAIN_DISABLE")
        load_signatures.cache_clear()
    assert some in {s.id for s in load_signatures()}


def test_the_generic_module_restates_no_sglang_code():
    from kvcheck.explain import generic

    src = inspect.getsource(generic)
    assert "import sglang" not in src and "from sglang" not in src
