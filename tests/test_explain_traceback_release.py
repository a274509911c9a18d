"""A traceback through SGLang's scheduler and memory pools: the releases its pasted source lines
fit, and whether the line that raised is still in the later releases (issue 20: "find the
release ... traceback line numbers against each release's source"; "tracebacks from bugs fixed
since, with the fixing release").

The frames are written for these tests; each expected answer was read in the release wheels
(``pip download --no-deps sglang==X``), cited at each test. ``line_digests.json.gz`` holds a
one-byte digest per line, so every assertion below is a value of the releases' own source.
"""

from __future__ import annotations

from kvcheck.explain import explain_text, funcchanges, linedigests
from kvcheck.explain.logrelease import load_index

SCHED = "srt/managers/scheduler.py"
RADIX = "srt/mem_cache/radix_cache.py"
POOL = "srt/mem_cache/memory_pool.py"
SITE = "/usr/local/lib/python3.12/dist-packages/sglang"

# SGLang 0.5.3's scheduler.py:2883, in run_scheduler_process (the decode's overlap event loop).
# 0.5.7 .. 0.5.8.post1's run_scheduler_process also spans line 2883, with other text there.
DISPATCH = "scheduler.event_loop_overlap_disagg_decode()"
# SGLang 0.5.6 .. 0.5.7's radix_cache.py:509, in RadixCache.cache_unfinished_req; the same assert
# is at 513 in 0.5.8, 530 in 0.5.9, 547 in 0.5.10/0.5.10.post1, and in no line of 0.5.11's
# cache_unfinished_req (radix_cache.py:535 on).
UNFINISHED = 'assert len(new_indices) == len(keys), f"{len(new_indices)=}, {len(keys)=}"'
# SGLang 0.5.6's memory_pool.py:255, in MambaPool.get_speculative_mamba2_params_all_layers; the
# same assert is the function's first line in 0.5.23 (memory_pool.py:1100).
SPEC_STATE = "assert isinstance(self.mamba_cache, self.SpeculativeState)"


def _tb(*frames: tuple[str, int, str, str], exc: str = "AssertionError", head: str = "") -> str:
    lines = [head] if head else []
    lines.append("[2026-03-02 09:14:55 TP0] Scheduler hit an exception: Traceback (most recent call last):")
    for f, n, func, src in frames:
        lines += [f'  File "{SITE}/{f}", line {n}, in {func}', f"    {src}"]
    if exc:
        lines.append(exc)
    return "\n".join(lines) + "\n"


def _generic(rep):
    return next(f for f in rep.findings if f.id == "python-exception-generic")


def test_the_pasted_text_wins_over_the_line_number():
    index = load_index()
    spans = [
        v
        for v in index["releases"]
        if any(a <= 2883 <= b for a, b in index["tables"][index["files"][v][SCHED]].get("run_scheduler_process", []))
    ]
    assert {"0.5.7", "0.5.8", "0.5.8.post1"} <= set(spans)  # the line number alone fits these
    assert linedigests.releases_fitting(SCHED, 2883, DISPATCH) == ["0.5.3"]
    rep = explain_text(_tb((SCHED, 2883, "run_scheduler_process", DISPATCH), exc=""), source="log").report
    assert rep.release.candidates == ["0.5.3"] and rep.release.release == "0.5.3"
    assert "traceback source lines" in rep.release.text()
    # cut before its exception: the line shown is not where it raised, so no fix is proposed
    f = _generic(rep)
    assert "cut before its exception" in f.cause and "Likely fixed" not in f.fix and "upgrade to" not in f.fix


def test_the_line_that_raised_gone_in_a_later_release_is_the_likely_fix():
    tr = funcchanges.trace_line(RADIX, "cache_unfinished_req", 509, UNFINISHED, "0.5.7")
    assert tr is not None and (tr.last, tr.gone) == ("0.5.10.post1", "0.5.11")
    text = _tb(
        (SCHED, 1023, "process_input_requests", "self.tree_cache.cache_unfinished_req(req)"),
        (RADIX, 509, "cache_unfinished_req", UNFINISHED),
        exc="AssertionError: len(new_indices)=7, len(keys)=8",
    )
    rep = explain_text(text, source="log").report
    assert set(rep.release.candidates) <= {"0.5.6", "0.5.6.post1", "0.5.6.post2", "0.5.7"}
    f = _generic(rep)
    assert "fits SGLang 0.5.6 .. 0.5.7" in f.cause and "from SGLang 0.5.11 on" in f.cause
    assert "Likely fixed in SGLang 0.5.11" in f.fix and "not a known fix" in f.fix


def test_a_line_still_in_the_newest_release_is_no_released_fix():
    newest = linedigests.all_releases()[-1]
    assert linedigests.releases_fitting(POOL, 255, SPEC_STATE) == ["0.5.6"]
    tr = funcchanges.trace_line(POOL, "get_speculative_mamba2_params_all_layers", 255, SPEC_STATE, "0.5.6")
    assert tr is not None and tr.gone == "" and tr.last == newest
    text = _tb((POOL, 255, "get_speculative_mamba2_params_all_layers", SPEC_STATE))
    f = _generic(explain_text(text, source="log").report)
    assert f"still in `memory_pool.py:get_speculative_mamba2_params_all_layers` in SGLang {newest}" in f.cause
    assert "No released fix shown" in f.fix and "upgrade to" not in f.fix


def test_a_stated_release_the_pasted_line_does_not_fit_is_said_and_the_text_is_followed():
    text = _tb(
        (POOL, 255, "get_speculative_mamba2_params_all_layers", SPEC_STATE),
        head="[2026-03-02 09:10:01] sglang==0.5.9",
    )
    rep = explain_text(text, source="log").report
    assert rep.release.release == "0.5.9" and rep.release.disagree == ["0.5.6"]
    assert "pasted source lines fit 0.5.6 instead" in rep.release.text()
    f = _generic(rep)
    assert "The pasted line fits SGLang 0.5.6 only, not 0.5.9" in f.cause and "No released fix shown" in f.fix


def test_the_tables_cover_the_pd_modules_within_their_size_budget():
    from importlib import resources

    for f in (SCHED, RADIX, POOL, "srt/managers/tokenizer_manager.py", "srt/entrypoints/http_server.py"):
        assert linedigests.covered(f) and funcchanges.load()["files"].get(f)
    assert linedigests.all_releases()[0] == "0.5.1" and linedigests.all_releases()[-1] == load_index()["releases"][-1]
    here = resources.files("kvcheck.explain")
    digests = len(here.joinpath("line_digests.json.gz").read_bytes())
    changes = len(here.joinpath("func_changes.json.gz").read_bytes())
    # the budget stated in scripts/gen_explain_line_digests.py
    assert digests < 1024 * 1024 and digests + changes < 1536 * 1024


# SGLang 0.5.6's mem_cache/allocator.py:538, in PagedTokenToKVPoolAllocator.alloc_decode; the same
# assert is at allocator.py:485 in 0.5.12.post1, and 0.5.13 split allocator.py into the package
# mem_cache/allocator/ (base.py, paged.py, ...): no allocator.py to follow it in.
ALLOC = "srt/mem_cache/allocator.py"
UNIQUE = "assert len(torch.unique(out_indices)) == len(out_indices)"


def test_a_file_split_in_a_later_release_is_not_called_the_fix():
    tr = funcchanges.trace_line(ALLOC, "alloc_decode", 538, UNIQUE, "0.5.6")
    assert tr is not None and (tr.last, tr.gone, tr.why) == ("0.5.12.post1", "0.5.13", "file")
    f = _generic(explain_text(_tb((ALLOC, 538, "alloc_decode", UNIQUE)), source="log").report)
    assert "from SGLang 0.5.13 on srt/mem_cache/allocator.py no longer exists (the code moved)" in f.cause
    assert "cannot follow the line that raised past SGLang 0.5.12.post1" in f.fix
    assert "Likely fixed" not in f.fix and "upgrade to" not in f.fix


def test_a_stated_release_the_pasted_lines_fit_says_so():
    text = _tb(
        (POOL, 255, "get_speculative_mamba2_params_all_layers", SPEC_STATE),
        head="[2026-03-02 09:10:01] sglang==0.5.6",
    )
    said = explain_text(text, source="log").report.release.text()
    assert said.startswith("SGLang 0.5.6 (version line, line 1)") and "traceback source lines fit it too" in said
