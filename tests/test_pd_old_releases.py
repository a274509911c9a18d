"""The PD path of SGLang 0.5.5 .. 0.5.12.post1: the prefill's per-request transfer and the
decode's v1 bootstrap checks.

In these releases ``NixlKVManager._add_remote_peer`` only stores the decode's registration;
each request's descriptor lists are built by ``add_transfer_request`` ->
``send_kvcache`` / ``send_kvcache_slice`` (``disaggregation/nixl/conn.py``), pairing regions
with ``get_mla_kv_ptrs_with_pp`` / ``get_mha_kv_ptrs_with_pp`` (``common/conn.py``), so a
wrong geometry fails at the first request. Before 0.5.10 the decode checks the prefill in
``CommonKVReceiver.__init__`` over the v1 ``/route``.

Expected values come from each release's own code: the installed 0.5.8 and 0.5.10 are
driven in their own processes (``tests/old_release_cases.py``); the static tests cite the
source line each value comes from. The seeded agreement over thousands of pairs is in
``tests/test_conformance_releases.py``.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, write_config
from kvcheck.preflight import run_preflight
from kvcheck.sglang import plan as builtin
from kvcheck.sglang.pd_release import behaviour
from kvcheck.sources import load_side

N = {"disaggregation-transfer-backend": "nixl"}
P = {"disaggregation-mode": "prefill", **N}
D = {"disaggregation-mode": "decode", **N}
RELEASES = Path(os.environ.get("KVCHECK_SGLANG_RELEASES_DIR") or (Path(sys.prefix) / "sglang-releases"))


def _pair(tmp_path, model, pa, da, *, pv, dv=None):
    p = load_side(str(write_config(tmp_path, "prefill", model, pa)), "prefill", sglang_version="0.5.23")  # the release this rested on (was the installed SGLang)
    d = load_side(str(write_config(tmp_path, "decode", model, da)), "decode", sglang_version="0.5.23")
    p.sglang_version, d.sglang_version = pv, dv or pv
    return run_preflight(p, d, kernel="builtin")


def _by_id(report):
    return {f.id: f for f in report.findings}


def test_releases_are_grouped_by_their_own_code():
    # pd_facts.json digests (scripts/gen_pd_facts.py): the per-request path changed in
    # 0.5.6.post1, 0.5.7, 0.5.8, 0.5.9, 0.5.11 and 0.5.12; the v1 checks in 0.5.7 and 0.5.8.
    variants = {v: behaviour(v).decision_variant for v in ("0.5.5", "0.5.6", "0.5.6.post2", "0.5.7", "0.5.8.post1", "0.5.10.post1", "0.5.11", "0.5.12.post1")}
    assert variants == {"0.5.5": "0.5.5", "0.5.6": "0.5.5", "0.5.6.post2": "0.5.6.post1", "0.5.7": "0.5.7", "0.5.8.post1": "0.5.8",
                        "0.5.10.post1": "0.5.9", "0.5.11": "0.5.11", "0.5.12.post1": "0.5.12"}
    assert all(behaviour(v).per_request_decision for v in variants) and not behaviour("0.5.13").per_request_decision
    assert [behaviour(v).bootstrap_variant for v in ("0.5.5", "0.5.6", "0.5.6.post1", "0.5.7", "0.5.8", "0.5.9", "0.5.10")] == [
        "0.5.5", "0.5.5", "0.5.6.post1", "0.5.6.post1", "0.5.8", "0.5.8", "0.5.10"]


@pytest.mark.parametrize("release", ["0.5.5", "0.5.7", "0.5.8", "0.5.10", "0.5.12.post1"])
def test_stored_digests_are_the_installed_release_s(release):
    root = RELEASES / release
    if not (root / "sglang" / "__init__.py").exists():
        pytest.skip(f"SGLang {release} is not installed beside this Python (scripts/setup-test-env.sh)")
    sys.path.insert(0, str(REPO / "scripts"))
    try:
        import gen_pd_facts
    finally:
        sys.path.pop(0)
    facts = gen_pd_facts.facts(root)
    stored = json.loads((REPO / "kvcheck" / "sglang" / "pd_facts.json").read_text())[release]
    assert (facts["bootstrap_hash"], facts["decision_hash"]) == (stored["bootstrap_hash"], stored["decision_hash"])


def test_0_5_12_reads_pointers_as_numpy_arrays():
    # 0.5.12 _send_kvcache_generic: dst_data_ptrs = np.array(dst_data_ptrs, dtype=np.uint64);
    # get_mla_kv_ptrs_with_pp slices it and dst_kv_ptrs[layer_id] raises numpy's IndexError;
    # transfer_worker catches it and fails the request.
    from conformance_pairs import side

    mla = dict(is_mla=True, pp=1, stages=[(0, 4)], page=64, tp=8)
    p = side("prefill", kinds=["VRAM"] * 5, items=[73728] * 5, n_draft=1, **mla)
    d = side("decode", kinds=["VRAM"] * 4, items=[73728] * 4, **mla)
    got = builtin.decide_transfer(p, d, behaviour=behaviour("0.5.12.post1")).error
    assert (got.type, got.message, got.when) == ("IndexError", "index 4 is out of bounds for axis 0 with size 4", "first request")
    assert "transfer_worker" in got.raised_by and "fails the same way" in got.operator_sees
    got = builtin.decide_transfer(p, d, behaviour=behaviour("0.5.11")).error
    assert (got.message, "Scheduler hit an exception" in got.operator_sees) == ("list index out of range", True)


def test_0_5_7_writes_v_into_the_decode_s_next_region_with_a_decode_only_draft():
    # 0.5.7 get_mha_kv_ptrs_with_pp: dst_v = dst[D + start : D + end] (D: half the decode's
    # regions, 3 with its draft K/V); 0.5.8 added the branch that offsets V by L * (D // L).
    from conformance_pairs import side

    mha = dict(is_mla=False, pp=1, stages=[(0, 2)], page=16, tp=2)
    p = side("prefill", kinds=["VRAM"] * 4, items=[4096] * 4, **mha)
    d = side("decode", kinds=["VRAM"] * 6, items=[4096] * 6, n_draft=2, **mha)
    assert builtin.decide_transfer(p, d, total_kv_heads=8, behaviour=behaviour("0.5.7")).dst_indices == [0, 1, 3, 4]
    assert builtin.decide_transfer(p, d, total_kv_heads=8, behaviour=behaviour("0.5.8")).dst_indices == [0, 1, 2, 3]


def test_first_request_errors_of_an_0_5_8_pair(tmp_path):
    # Llama-3.1-8B has 8 KV heads: 0.5.8 send_kvcache_slice computes
    # dst_heads_per_rank = kv_head_num * prefill_tp // decode_tp = 8 * 1 // 16 = 0.
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16, "tp-size": 16}, pv="0.5.8")
    f = _by_id(r)["head-slice-assert"]
    rt = f.runtime_error
    assert (rt.type, rt.message, rt.when) == ("ZeroDivisionError", "integer division or modulo by zero", "first request")
    assert "send_kvcache_slice" in rt.raised_by and "prefill server exits" in rt.operator_sees and "0.5.11" in f.fix
    # 0.5.11 takes max(1, total_kv_head_num // tp) (replicated heads): no error, but decode
    # rank r receives head (r x 1) mod 8 where it holds head r // 2 (the known issue of
    # 0.5.11 .. 0.5.12.post1, sglang#31295): silent corruption, an error; the per-slice plan
    # itself stays unstated (release-pd-unchecked), never a pass.
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16, "tp-size": 16}, pv="0.5.11")
    assert r.exit_code == 1 and "head-slice-assert" not in _by_id(r)
    assert any(f.id == "known-issue" and f.severity.value == "error" and "wrong-head" in f.message for f in r.findings)
    assert "replicated KV heads" in _by_id(r)["release-pd-unchecked"].message


def test_a_different_decode_item_is_silent_corruption_on_0_5_8(tmp_path):
    # send_kvcache strides both sides by the prefill's kv_item_lens[layer]: a float32 decode
    # reads at twice the stride the bfloat16 prefill wrote at. Nothing raises.
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "dtype": "bfloat16"}, {**D, "page-size": 16, "dtype": "float32"}, pv="0.5.8")
    assert r.verdict == "fail" and r.plan.path == "equal_tp" and r.plan.error is None
    assert _by_id(r)["item-length-larger"].severity.value == "error"
    # a shorter one is not checked either before 0.5.15 (0.5.15 raises 'transfer length exceeds item stride')
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "dtype": "float32"}, {**D, "page-size": 16, "dtype": "bfloat16"}, pv="0.5.8")
    f = _by_id(r)["item-length-larger"]
    assert r.verdict == "fail" and r.plan.path == "equal_tp" and r.plan.error is None
    assert f.severity.value == "error" and "shorter than the 65536-byte items of prefill region 0" in f.message  # 16 tokens x 8 heads x 128 x 4 bytes


def test_aligned_0_5_8_pair_passes_and_shows_the_per_request_path(tmp_path):
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "tp-size": 2}, {**D, "page-size": 16, "tp-size": 4}, pv="0.5.8")
    assert r.plan.path == "hetero_tp_slice" and r.plan.segments[0].as_list() == [0, 64, "VRAM", "VRAM"]
    assert r.exit_code == 0 and "release-pd-unchecked" not in _by_id(r)


def test_v1_bootstrap_checks_of_0_5_8_and_0_5_9(tmp_path):
    # CommonKVReceiver.__init__ (0.5.8): the page-size RuntimeError, then the PP assert; no
    # kv-cache-dtype or CP check exists before 0.5.10.
    for v in ("0.5.8", "0.5.9"):
        r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "pp-size": 2}, {**D, "page-size": 32, "pp-size": 4, "kv-cache-dtype": "fp8_e4m3"}, pv=v)
        f = _by_id(r)
        assert f["page-size-mismatch"].runtime_error.message.startswith("Page size mismatch: prefill server has page_size=16, but decode server has page_size=32.")
        assert "CommonKVReceiver.__init__" in f["page-size-mismatch"].runtime_error.raised_by
        assert f["pp-size-mismatch"].runtime_error.type == "AssertionError" and "kv-cache-dtype-mismatch" not in f
    # 0.5.6.post1 .. 0.5.7 have the PP assert but no page-size check; 0.5.5 .. 0.5.6 neither.
    # What a pair they let through then does is unchecked (here it also writes 16-token
    # pages into 32-token ones at the prefill's stride: item-length-larger, corruption).
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 16}, pv="0.5.7")
    assert r.exit_code == 0 and "release-pd-unchecked" not in _by_id(r)
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16}, {**D, "page-size": 32}, pv="0.5.7")
    f = _by_id(r)
    assert r.verdict == "fail" and "item-length-larger" in f and "page-size-mismatch" not in f
    assert any("does not compare page sizes (the check came in 0.5.8)" in x.message for x in r.findings if x.id == "release-pd-unchecked")
    r = _pair(tmp_path, "llama-3.1-8b", {**P, "page-size": 16, "pp-size": 2}, {**D, "page-size": 16, "pp-size": 4}, pv="0.5.6")
    unchecked = [f.message for f in r.findings if f.id == "release-pd-unchecked"]
    assert "pp-size-mismatch" not in _by_id(r) and any("does not check PP sizes" in m for m in unchecked)


@pytest.mark.runtime
@pytest.mark.parametrize("release", ["0.5.5", "0.5.7", "0.5.8", "0.5.10", "0.5.12.post1"])
def test_named_cases_agree_with_the_release_s_own_code(release):
    from kvcheck.sglang.pd_release import at_least

    root = RELEASES / release
    if not (root / "sglang" / "__init__.py").exists():
        pytest.skip(f"SGLang {release} is not installed beside this Python (scripts/setup-test-env.sh)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(RELEASES / "_deps"), str(REPO), str(REPO / "tests"), str(REPO / "tests" / "stubs")])
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "old_release_cases.py"), release], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["imported"] == release
    t = out["transfer"]
    # what the release's own add_transfer_request (0.5.12: transfer_worker) did
    numpy = at_least(release, "0.5.12")
    assert t["mla_prefill_only_draft"]["runtime"]["error"] == (
        ["IndexError", "index 4 is out of bounds for axis 0 with size 4"] if numpy else ["IndexError", "list index out of range"]
    )
    if at_least(release, "0.5.11"):  # max(1, total_kv_head_num // tp): replicated heads, no error
        assert t["mha_decode_replicates_heads"]["runtime"]["path"] == "hetero_tp_slice"
        assert t["mha_decode_replicates_heads"]["builtin"]["path"] == "not_modeled"  # unchecked, never a pass
    else:
        assert t["mha_decode_replicates_heads"]["runtime"]["error"] == ["ZeroDivisionError", "integer division or modulo by zero"]
    # a decode-only draft: 0.5.8 offsets V by L * (D // L); before, V starts at D (one region late)
    assert t["mha_decode_only_draft"]["runtime"]["dst_indices"] == ([0, 1, 2, 3] if at_least(release, "0.5.8") else [0, 1, 3, 4])
    assert t["mha_head_slices"]["runtime"]["path"] == "hetero_tp_slice" and t["mha_head_slices"]["runtime"]["write_lens"] == [512] * 4
    assert t["mha_longer_decode_item"]["runtime"]["write_lens"] == [4096] * 4  # the prefill's item length, not the decode's 8192
    assert t["mha_shorter_decode_item"]["runtime"]["write_lens"] == [8192] * 4  # no check: 8192-byte items into 4096-byte pages
    for name, c in t.items():
        if c["builtin"]["path"] != "not_modeled":
            assert c["builtin"] == c["runtime"], name
    b = out["bootstrap"]
    assert b["accepted"]["runtime"] is None
    assert (b["page_size"]["runtime"] or [None])[0] == ("RuntimeError" if at_least(release, "0.5.8") else None)  # v1 check from 0.5.8
    pp = ["AssertionError", "('Decode pp size (4) should be equal to prefill pp size (2) or 1',)"]
    assert b["pp_size"]["runtime"] == (pp if at_least(release, "0.5.6.post1") else None)
    for name, c in b.items():
        assert c["builtin"] == c["runtime"], name


@pytest.mark.runtime
@pytest.mark.parametrize("release", ["0.5.8", "0.5.10", "0.5.12.post1"])
def test_dsa_index_k_transfer_agrees_with_the_release_s_own_code(release):
    """The DSA index-K ("nsa" state) of a request's last chunk through the release's own NIXL
    code (``tests/dsa_state_worker.py``): 0.5.8's last-chunk send builds no list from the state
    pointers (kvcheck: silent corruption, the decode's index keys are never written); from 0.5.9
    ``maybe_send_extra`` writes entry i into decode entry i at the decode page x the prefill's
    item length (kvcheck: decided; a longer decode item is written at the wrong offset:
    corruption); a decode with fewer entries raises (kvcheck: unchecked, never a pass)."""
    root = RELEASES / release
    if not (root / "sglang" / "__init__.py").exists():
        pytest.skip(f"SGLang {release} is not installed beside this Python (scripts/setup-test-env.sh)")
    env = dict(os.environ)
    env["PYTHONPATH"] = os.pathsep.join([str(root), str(RELEASES / "_deps"), str(REPO), str(REPO / "tests"), str(REPO / "tests" / "stubs")])
    proc = subprocess.run([sys.executable, str(REPO / "tests" / "dsa_state_worker.py"), release], env=env, capture_output=True, text=True, timeout=600)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["imported"] == release
    c = out["cases"]
    if release == "0.5.8":
        for name, case in c.items():
            assert case["runtime"] == {"path": "not_sent", "error": None, "writes": []}, name
            assert case["kvcheck"]["corruption"], name
        return
    item, page_dst = 64 * 132, 5
    assert c["equal"]["runtime"]["writes"] == [[i, i, page_dst * item, item] for i in range(4)]
    assert c["equal"]["kvcheck"]["path"] == "whole_generic"
    # the prefill's stride into a decode whose pages hold 2 x item bytes: page 5 lands mid page 2
    assert c["decode_longer_item"]["runtime"]["writes"] == [[i, i, page_dst * item, item] for i in range(4)]
    assert c["decode_longer_item"]["kvcheck"]["corruption"]
    assert c["decode_only_draft_entry"]["runtime"]["writes"] == [[i, i, page_dst * item, item] for i in range(4)]
    assert c["decode_only_draft_entry"]["kvcheck"]["path"] == "whole_generic"
    assert c["decode_fewer_entries"]["runtime"]["error"][0] == "IndexError" and c["decode_fewer_entries"]["kvcheck"]["unchecked"]


def test_dsa_pairs_before_0_5_13_are_decided_by_their_own_transfer(tmp_path):
    """DeepSeek V3.2 (DSA) over NIXL on the per-request releases: the KV regions go by
    send_kvcache's MLA branch, the index-K by each release's state path (kvcheck.sglang.dsa_pd).
    fp8 rows on a named GPU with the same flags on both sides are decided; on an assumed GPU
    their layout is each release's own rule: unchecked."""
    fp8 = {"tp-size": 8, "page-size": 64, "kv-cache-dtype": "fp8_e4m3", "kvcheck-gpu": "b200"}
    for release in ("0.5.9", "0.5.11", "0.5.12.post1"):
        r = _pair(tmp_path, "deepseek-v3.2", {**P, **fp8}, {**D, **fp8}, pv=release)
        assert r.exit_code == 0 and r.plan.path == "equal_tp", (release, [f.message for f in r.findings])
        assert "release-pd-unchecked" not in _by_id(r) and "state-components" not in _by_id(r), release
    r = _pair(tmp_path, "deepseek-v3.2", {**P, **fp8}, {**D, **fp8}, pv="0.5.8")
    f = _by_id(r)
    assert r.verdict == "fail" and "state-transfer" in f and "never reaches the decode" in f["state-transfer"].message
    no_gpu = {k: v for k, v in fp8.items() if k != "kvcheck-gpu"}
    r = _pair(tmp_path, "deepseek-v3.2", {**P, **no_gpu}, {**D, **no_gpu}, pv="0.5.11")
    assert r.verdict == "unchecked" and "fp8 DSA KV rows on GPUs kvcheck was not given" in _by_id(r)["release-pd-unchecked"].message
    bf16 = {"tp-size": 8, "page-size": 64, "kv-cache-dtype": "bfloat16"}
    r = _pair(tmp_path, "deepseek-v3.2", {**P, **bf16}, {**D, **bf16}, pv="0.5.10")
    assert r.exit_code == 0 and r.plan.path == "equal_tp"
