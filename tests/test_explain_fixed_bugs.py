"""``kvcheck explain`` on tracebacks of SGLang bugs that a merged change fixed (issue 20:
"tracebacks from bugs fixed since, with the fixing release"): ``fixed_bugs.yaml``.

The table is checked against the releases' own source: ``fixed_bugs_facts.json`` holds, per
release, whether its wheel has each fix, the raising code and the innermost frame
(``scripts/gen_explain_fixed_bugs.py`` reads the wheels); ``release_index.json`` (every
release's functions by file, from ``scripts/gen_explain_release_index.py``) confirms the frames.
The excerpts below are written for these tests in SGLang's traceback format; the facts asserted
are the releases' (which release first has the fix, which ones have the bug).
"""

from __future__ import annotations

import yaml

from kvcheck.explain import fixedbugs
from kvcheck.explain.logrelease import load_index
from kvcheck.explain.matcher import explain_text


def first(lines: list[str]):
    rep = explain_text("\n".join(lines), source="log").report
    return rep.first_cause, rep


def entry(bug_id: str) -> fixedbugs.FixedBug:
    return next(b for b in fixedbugs.index() if b.id == bug_id)


def first_with_fix(bug_id: str) -> str:
    """The first release whose wheel has the fix, after the first one that has the bug."""
    fx = fixedbugs.facts()
    e = fx["entries"][bug_id]
    bad = [i for i, (b, x) in enumerate(zip(e["bug"], e["fix"], strict=True)) if b == "1" and x == "0"]
    start = bad[0] if bad else -1
    return fx["releases"][next(i for i, c in enumerate(e["fix"]) if c == "1" and i > start)]


# ------------------------------------------------------------------ the table against the releases


def test_every_fixed_in_is_the_first_release_whose_source_has_the_fix():
    fx = fixedbugs.facts()
    raw = yaml.safe_load(open(fixedbugs.__file__.replace("fixedbugs.py", "fixed_bugs.yaml"), encoding="utf-8"))
    assert {e["id"] for e in raw} == set(fx["entries"]), "facts out of date: run scripts/gen_explain_fixed_bugs.py"
    for bug in fixedbugs.index():
        assert bug.fixed_in == first_with_fix(bug.id), bug.id
        assert bug.fixed_in not in bug.affected, bug.id
        # every release the bug is said to affect comes before the fix
        order = fx["releases"]
        assert all(order.index(r) < order.index(bug.fixed_in) or r in order for r in bug.affected)


def test_every_frame_is_defined_in_the_releases_the_bug_affects():
    """The innermost frame an entry names is a function of that file in every affected release
    (the wheels' facts) and, for the releases and files ``release_index.json`` covers, in that
    index too."""
    fx = fixedbugs.facts()
    idx = load_index()
    checked = 0
    for bug in fixedbugs.index():
        if not bug.frame_function:
            continue
        bits = fx["entries"][bug.id]["frame"]
        for r in bug.affected:
            assert bits[fx["releases"].index(r)] == "1", (bug.id, r)
            for f in bug.frame_files:
                table = idx["files"].get(r, {}).get(f)
                if table is not None:
                    assert bug.frame_function in idx["tables"][table], (bug.id, r, f)
                    checked += 1
    assert checked >= 20  # the index confirms frames in many releases, not a token few


def test_the_index_is_broad_and_every_entry_cites_its_thread():
    bugs = fixedbugs.index()
    assert len(bugs) >= 15
    for b in bugs:
        assert b.url.startswith("https://github.com/sgl-project/sglang/"), b.id
        assert b.prs or b.issue, b.id


# ------------------------------------------------------------------ tracebacks matched structurally


MERGE = [
    "[2025-05-21 10:02:13 TP3] Scheduler hit an exception: Traceback (most recent call last):",
    '  File "/opt/sgl/python/sglang/srt/managers/scheduler.py", line 2301, in run_scheduler_process',
    "    scheduler.event_loop_normal_disagg_decode()",
    '  File "/opt/sgl/python/sglang/srt/disaggregation/decode.py", line 560, in event_loop_normal_disagg_decode',
    "    batch = self.get_next_disagg_decode_batch_to_run()",
    '  File "/opt/sgl/python/sglang/srt/disaggregation/decode.py", line 601, in get_next_disagg_decode_batch_to_run',
    "    self.running_batch.merge_batch(last_batch)",
    '  File "/opt/sgl/python/sglang/srt/managers/schedule_batch.py", line 1533, in merge_batch',
    "    self.multimodal_inputs.extend(other.multimodal_inputs)",
    "AttributeError: 'NoneType' object has no attribute 'extend'",
]


def test_a_decode_merge_of_uninitialized_multimodal_inputs_names_the_fixing_release():
    f, _ = first(MERGE)
    assert f.id == "pd-decode-multimodal-inputs-none"
    fixed = first_with_fix(f.id)  # the first wheel whose merge_batch guards None
    assert fixed == "0.4.6.post5"
    assert f"fixed in {fixed}" in f.title and f"SGLang {fixed} or later" in f.fix
    assert "PR #6169" in f.cause


def test_the_same_exception_in_another_function_is_not_that_bug():
    from kvcheck.explain import funcchanges

    other = [ln.replace("in merge_batch", "in filter_batch") for ln in MERGE]
    f, _ = first(other)
    assert f.id == "python-exception-generic"
    # the general answer still carries the releases' evidence for the function that raised
    first_rel, last_rel, changed = funcchanges.changes("srt/managers/schedule_batch.py", "filter_batch")
    assert f"exists in SGLang {first_rel} .. {last_rel}" in f.cause and changed[-1] in f.cause


def test_a_fragment_of_the_message_is_not_the_bug():
    f, _ = first(["AttributeError: 'ChunkCache' object has no attribute 'release_aborted_request_v2'"])
    assert f is None or f.id != "pd-decode-offload-abort-chunkcache"
    f, _ = first(["AttributeError: 'ChunkCache' object has no attribute 'release_aborted_request'"])
    assert f.id == "pd-decode-offload-abort-chunkcache"
    assert entry(f.id).affected[-1] == "0.5.19" and first_with_fix(f.id) == "0.5.20"


def test_a_leak_check_names_the_bug_by_its_fields():
    """The offload manager's never-released count shows as a protected size larger than the
    pool; a negative one is the decode radix cache combined with decode offload; a plain leak
    (protected within the pool) is neither."""
    grows = (
        "ValueError: token_to_kv_pool_allocator memory leak detected! self.max_total_num_tokens=200000, "
        "available_size=200000, evictable_size=0, protected_size=987654"
    )
    f, _ = first([grows])
    assert f.id == "pd-decode-offload-protected-never-released" and f.phase == "serving"
    assert "0.5.5.post3" in f.title and entry(f.id).fixed_in == first_with_fix(f.id)
    plain = grows.replace("protected_size=987654", "protected_size=4096")
    f, _ = first([plain])
    assert f.id != "pd-decode-offload-protected-never-released"
    # 0.5.11 .. 0.5.20: _report_leak("pool", ...) of _check_pool_invariant's
    # "[{pool_name}] {total=}, {available=}, {evictable=}, {protected=}, {session_held=}, {uncached=}"
    negative = (
        "ValueError: pool memory leak detected! [full] total=90000, available=90000, evictable=0, "
        "protected=-7, session_held=0, uncached=0"
    )
    f, _ = first([negative])
    assert f.id == "pd-decode-radix-offload-lock-accounting"
    assert "--disaggregation-decode-enable-radix-cache" in f.cause
    assert entry(f.id).affected[0] == "0.5.11"  # the decode radix cache's first release


def test_a_negative_protected_in_another_message_is_not_the_lock_accounting_bug():
    """Only the idle check's own format names the bug: a negative number after 'protected' in the
    busy-time memory log ('[Mem Check (BUSY)] ... protected_size=...'), in LMCache's radix cache log
    ('evictable=%d protected=%d') or in a leak line missing the format's fields is not it."""
    for text in (
        "[Mem Check (BUSY)] available_size=10, evictable_size=0, protected_size=-3, uncached_size=0",
        "pool memory leak detected! [full] total=90000, available=90000, evictable=0, protected=-7, uncached=0",
        "ValueError: allocator memory leak detected! something protected=-4 happened",
        "RuntimeError: LMCache radix cache: evictable=0 protected=-2",
    ):
        f, _ = first([text])
        assert f is None or f.id != "pd-decode-radix-offload-lock-accounting", text


def test_a_nixl_status_in_the_heterogeneous_tp_prep_is_the_replicated_head_bug():
    lines = [
        "Traceback (most recent call last):",
        '  File "/usr/lib/python3/site-packages/sglang/srt/disaggregation/nixl/conn.py", line 812, '
        "in _init_hetero_tp_prep_handle",
        '    src = self.agent.prep_xfer_dlist("", src_descs, "VRAM")',
        '  File "/usr/lib/python3/site-packages/nixl/_api.py", line 540, in prep_xfer_dlist',
        "    handle = self.agent.prepXferDlist(agent_name, descs, backends)",
        "nixl._bindings.nixlNotFoundError: NIXL_ERR_NOT_FOUND",
    ]
    f, _ = first(lines)
    # the signature that reads the NIXL step and the index agree on the fixing release
    assert f.id == "nixl-hetero-attn-tp-dlist"
    fixed = first_with_fix("nixl-hetero-tp-replicated-kv-heads")
    assert fixed == "0.5.17" and f"SGLang {fixed}" in f.fixed_in and f"SGLang {fixed}" in f.fix
    lone = [ln for ln in lines if "prep_xfer_dlist" not in ln and "prepXferDlist" not in ln]
    f, _ = first(lone)
    assert f.id == "nixl-hetero-tp-replicated-kv-heads" and f.phase == "first-transfer"
    assert entry(f.id).affected == ("0.5.13", "0.5.13.post1", "0.5.14", "0.5.15", "0.5.15.post1", "0.5.16")


def test_a_lone_ngram_kernel_type_error_is_the_pd_loop_bug():
    f, _ = first(
        [
            "TypeError: Mismatched type on argument #2 when calling `_ngram_embedding::update_token_table`. "
            "Expected `DLTensor*` but got `None`"
        ]
    )
    assert f.id == "pd-ngram-embedding-not-prepared"
    assert "0.5.10 .. 0.5.15.post1" in f.cause  # the releases with n-gram embedding and not the fix


# ------------------------------------------------------------------ no indexed bug: the release evidence


def _unindexed(version_line: str) -> list[str]:
    """A decode traceback of a lookup in pop_preallocated, which no indexed bug names."""
    return [
        f"[2026-04-20 08:00:01] {version_line}",
        "[2026-04-20 08:10:02 TP1] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/srv/venv/lib/python3.12/site-packages/sglang/srt/managers/scheduler.py", line 3100, '
        "in run_scheduler_process",
        "    scheduler.run_event_loop()",
        '  File "/srv/venv/lib/python3.12/site-packages/sglang/srt/disaggregation/decode.py", line 911, '
        "in pop_preallocated",
        "    info = self.pending_infos[decode_req.req.rid]",
        "KeyError: 'req-42'",
    ]


def test_a_traceback_no_bug_names_says_when_the_raising_function_changed_after_the_logs_release():
    from kvcheck.explain import funcchanges

    first_rel, _last, changed = funcchanges.changes("srt/disaggregation/decode.py", "pop_preallocated")
    assert first_rel == "0.5.5"  # the first release the table covers defines it
    later = [c for c in changed if c not in ("0.5.7", "0.5.8", "0.5.9", "0.5.10")]
    f, rep = first(_unindexed("sglang==0.5.10"))
    assert f.id == "python-exception-generic" and rep.release.release == "0.5.10"
    assert "`decode.py:pop_preallocated`" in f.cause and later[0] in f.cause
    assert f"upgrade to {later[0]} or later" in f.fix


def test_a_function_unchanged_since_the_logs_release_is_not_said_to_be_fixed_by_an_upgrade():
    from kvcheck.explain import funcchanges

    _first, last, changed = funcchanges.changes("srt/disaggregation/decode.py", "pop_preallocated")
    newest = changed[-1]  # a log of the last release that changed it: no later change to name
    f, _ = first(_unindexed(f"sglang=={newest}"))
    assert "was not changed after" in f.cause and f"up to {last}" in f.cause
    assert "upgrade to" not in f.fix and "An upgrade alone is not shown" in f.fix


def test_the_change_table_covers_the_indexed_releases_and_stays_small():
    from importlib import resources

    from kvcheck.explain import funcchanges

    assert funcchanges.load()["releases"] == load_index()["releases"]
    size = resources.files("kvcheck.explain").joinpath("func_changes.json.gz").read_bytes()
    assert len(size) < 300 * 1024


# ------------------------------------------------------------------ a crash's phase is the log's


_CRASH = [
    "[node3:5120 :1:5177] Caught signal 11 (Segmentation fault: address not mapped to object at address (nil))",
    "==== backtrace (tid:   5177) ====",
    " 0  /opt/nixl/lib/libucs.so.0(ucs_handle_error+0x2dc) [0x7f00aa0b0fdc]",
    " 1  /opt/nixl/lib/libucp.so.0(ucp_worker_arm+0x41) [0x7f00a9f1a3b1]",
    " 2  /opt/nixl/lib/plugins/libplugin_UCX.so(_ZN19nixlUcxSharedThread3runEv+0x91) [0x7f00a9d4e201]",
    "=================================",
]
_START = "[2026-03-02 09:00:01] server_args=ServerArgs(model_path='m', disaggregation_mode='decode')"
_READY = "[2026-03-02 09:02:11] The server is fired up and ready to roll!"
_DECODING = (
    "[2026-03-02 09:03:00 TP0] Decode batch, #running-req: 3, #token: 900, token usage: 0.01, "
    "gen throughput (token/s): 288.0, #queue-req: 0"
)


def test_a_nixl_progress_thread_crash_takes_the_phase_the_log_shows():
    """The same crash stack is said at start-up when the log shows the server still starting,
    and during serving when the decode was generating tokens before it."""
    f, _ = first([_START, *_CRASH])
    assert f.engine == "nixl" and "ucp_worker_arm" in f.title  # NIXL's UCX plugin thread, from the stack
    assert (f.phase, f.phase_from) == ("startup", "log")
    f, _ = first([_START, _READY, _DECODING, *_CRASH])
    assert f.engine == "nixl" and (f.phase, f.phase_from) == ("serving", "log")


def test_a_fixed_bug_raised_while_serving_takes_the_logs_phase():
    line = "AttributeError: 'DecodeRequest' object has no attribute 'priority'"
    f, _ = first([line])
    assert f.id == "pd-decode-request-priority" and f.phase == "serving" and f.phase_from == "message"
    f, _ = first([_START, _READY, line])
    assert f.id == "pd-decode-request-priority" and entry(f.id).fixed_in == first_with_fix(f.id) == "0.5.12"


def test_a_pp_prefill_inflight_assert_and_a_lone_unpack_error():
    """The inflight queue's assert is the PP prefill bug only in that function; the bare
    ``cannot unpack`` message alone names nothing (it needs the receiver's frame)."""
    tb = [
        "[2026-03-01 12:00:00 PP1 TP0] Scheduler hit an exception: Traceback (most recent call last):",
        '  File "/venv/lib/python3.12/site-packages/sglang/srt/disaggregation/prefill.py", line 612, '
        "in process_disagg_prefill_inflight_queue",
        "    assert poll == KVPoll.Success or poll == KVPoll.Failed",
        "AssertionError",
    ]
    f, _ = first(tb)
    assert f.id == "pd-prefill-pp-inflight-poll-assert"
    assert first_with_fix(f.id) == "0.5.10" and entry(f.id).affected[-1] == "0.5.9"
    f, _ = first(["TypeError: cannot unpack non-iterable NoneType object"])
    assert f is None or f.id != "pd-decode-prefill-info-unpack-none"


# ------------------------------------------------------------------ logged lines and catalog messages


_QUERY = (
    "[2026-02-11 03:04:05 TP2] Error querying dp_ranks from bootstrap: HTTPConnectionPool(host='10.1.2.3', "
    'port=8998): Max retries exceeded with url: /query_dp_ranks (Caused by NewConnectionError("<urllib3'
    '.connection.HTTPConnection object>: Failed to establish a new connection: [Errno {no}] {text}"))'
)


def test_a_logged_dp_rank_query_out_of_ports_is_the_polling_bug_and_a_refusal_is_not():
    f, _ = first([_QUERY.format(no=99, text="Cannot assign requested address")])
    assert f.id == "pd-decode-query-dp-ranks-port-exhaustion" and f.phase == "serving"
    assert first_with_fix(f.id) == "0.5.10" and "0.5.10 or later" in f.fix
    f, _ = first([_QUERY.format(no=111, text="Connection refused")])
    assert f.id != "pd-decode-query-dp-ranks-port-exhaustion"


def test_a_catalog_message_of_a_fixed_bug_names_the_fix_and_a_stated_release_that_has_it():
    line = "ValueError: NIXL prepared dlist geometry length mismatch: ptrs=61, item_lens=61, data_lens=61, xfer_lens=60"
    f, _ = first([line])
    fixed = first_with_fix("nixl-spec-decode-draft-layers-geometry")
    assert fixed == "0.5.15"  # the first wheel that cuts the decode's draft buffers off the list
    assert f.values.get("fixed_bug") == "nixl-spec-decode-draft-layers-geometry"
    assert f"fixed in {fixed}" in f.title and "already has this fix" not in f.cause
    f, _ = first(["sglang==0.5.17", line])  # a release the log states, with the fix
    assert "already has this fix" in f.cause
