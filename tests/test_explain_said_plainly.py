"""`kvcheck explain` says what it knows and no more: a line only attributed is "not
explained" (exit 1); a line is its named file's project's; a message cut short does not
narrow the release by what it lacks; a distinctive opening pasted alone is recognized at
lower confidence; the decode-registration phase is said the same way everywhere.

Every excerpt is written for the test. The runtime facts are read from the SGLang installed
here (0.5.23's source, not imported) and from the projects' own formats kvcheck ships
(``engine_formats.json.gz``, generated from their source)."""

from __future__ import annotations

import ast
import importlib.util
import json
from pathlib import Path

from helpers import run_cli

from kvcheck.explain.catalog import load_catalog
from kvcheck.explain.formats import load_engine_formats, load_formats, match_line
from kvcheck.explain.matcher import explain_text
from kvcheck.explain.render import render_explanation, when_words

UCX_LINE = "UCX  ERROR   failed to open IB device mlx5_0"
VLLM_LINE = (
    "(VllmWorker rank=0 pid=4711) ERROR 12-01 10:00:00 [nixl_connector.py:812] NIXL transfer failed for request abc"
)
PAGE_CUT = "RuntimeError: Page size mismatch: prefill server has page_size=16"


def _function_source(module: str, qualname: str) -> str:
    """The installed SGLang's source of ``module``'s ``Class.function`` (read, not imported)."""
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin
    path = Path(spec.origin).parent.parent / (module.replace(".", "/") + ".py")
    text = path.read_text("utf-8")
    cls, _, fn = qualname.rpartition(".")
    for node in ast.walk(ast.parse(text)):
        if isinstance(node, ast.ClassDef) and node.name == cls:
            for item in node.body:
                if isinstance(item, ast.FunctionDef) and item.name == fn:
                    return ast.get_source_segment(text, item) or ""
    raise AssertionError(f"{module}.{qualname} not in the installed SGLang")


# ------------------------------------------------------------------ attributed, not explained


def test_a_line_only_attributed_is_said_not_explained_with_exit_1():
    result = explain_text(UCX_LINE)
    assert [f.engine for f in result.foreign] == ["ucx"] and result.report.findings == []
    assert not result.recognized and result.exit_code == 1
    assert result.attributed_only == ["UCX (native library)"]
    out = render_explanation(result)
    assert "not explained: kvcheck names whose lines these are (UCX (native library))" in " ".join(out.split())
    assert "named, not explained" in out and "recognized" not in out
    proc = run_cli("explain", UCX_LINE, "-o", "json")
    assert proc.returncode == 1, proc.stderr
    data = json.loads(proc.stdout)
    assert data["recognized"] is False and data["attributed_only"] == ["UCX (native library)"]


def test_a_process_kvcheck_has_no_formats_for_is_repeated_not_explained():
    result = explain_text(
        "2026-01-01T00:00:00.000Z  ERROR dynamo_llm::discovery: KV Router block size mismatch! 16 vs 64"
    )
    f = result.report.first_cause
    assert f is not None and f.engine == "dynamo" and not f.explains  # the line's words, said as Dynamo's
    assert result.exit_code == 1 and result.attributed_only == ["Dynamo"]


# ------------------------------------------------------------------ a line is its file's project's


def test_a_vllm_line_from_nixl_connector_is_never_another_projects_message():
    engines = load_engine_formats()
    # the file the line names is vLLM's (and LMCache's and Dynamo's: a basename shared);
    # LMCache prints "NIXL transfer failed" from another file of its own
    assert "nixl_connector.py" in engines["vllm"].files and "nixl_connector.py" in engines["lmcache"].files
    lmc = engines["lmcache"].match("NIXL transfer failed for request abc")
    assert lmc is not None and not lmc.module.endswith("nixl_connector.py")
    # vLLM (the prefix's project) has no format for it; LMCache's, from another of its
    # files, is not this line's text
    assert match_line("NIXL transfer failed for request abc", "error", "nixl_connector.py", "vllm")[1] is None
    result = explain_text(VLLM_LINE)
    assert [e.engine for e in result.report.engines] == ["vllm"]
    assert all(f.engine != "lmcache" and f.host != "lmcache" for f in result.report.findings)
    assert "LMCache" not in render_explanation(result)
    assert result.exit_code == 1  # vLLM's line, which no vLLM format or signature reads: not explained


# ------------------------------------------------------------------ a message cut short


def test_a_message_cut_short_keeps_every_release_its_opening_is_in():
    src = _function_source("sglang.srt.disaggregation.common.conn", "CommonKVManager.try_ensure_parallel_info")
    assert "Page size mismatch: prefill server has page_size=" in src  # 0.5.23 raises it (the cut paste's text)
    m = load_formats().match(PAGE_CUT)
    assert m is not None and m.truncated
    assert {"0.5.8", "0.5.9", "0.5.10", "0.5.23"} <= set(m.releases)  # 0.5.8-0.5.9's receiver and 0.5.10+'s manager
    rep = explain_text(PAGE_CUT).report
    assert rep.release.release is None and "0.5.23" in rep.release.candidates and "0.5.10" in rep.release.candidates


def test_the_release_explained_against_and_the_catalogs_release_do_not_contradict():
    result = explain_text(PAGE_CUT, sglang_version="0.5.9")
    out = " ".join(render_explanation(result).split())
    assert "messages explained against 0.5.9 (--sglang-version)" in out
    assert (
        "explained from sglang 0.5.23's code (kvcheck's catalog is written from that release's code; for SGLang "
        "0.5.9, the release this text is explained against" in out
    )
    assert "SGLang 0.5.9: exists in SGLang 0.5.9" in out


# ------------------------------------------------------------------ a distinctive opening


def test_a_distinctive_opening_pasted_alone_is_recognized_at_lower_confidence():
    src = _function_source("sglang.srt.disaggregation.common.conn", "CommonKVManager.try_ensure_parallel_info")
    assert '"Page size mismatch: ' in src or 'f"Page size mismatch: ' in src
    for text in ("Page size mismatch", "RuntimeError: Page size mismatch"):
        result = explain_text(text)
        assert [(h.entry_id, h.match) for h in result.hits] == [("page-size-mismatch", "opening")], text
        assert result.exit_code == 0
        assert "opening only, lower confidence" in render_explanation(result)


def test_an_opening_shared_short_or_inside_a_line_is_not_a_message():
    # two words; words inside a longer line; words from a message's middle
    for text in (
        "Page size",
        "we saw a Page size mismatch here",
        "with speculative decoding",
        "prefill server has page_size",
    ):
        assert explain_text(text).hits == [], text
    # another project's message starts so too (LMCache's "NIXL transfer failed"): no catalog hit
    assert any(f[0][0].startswith("NIXL transfer failed") for f in load_engine_formats()["lmcache"].formats)
    assert explain_text("NIXL transfer failed").hits == []


# ------------------------------------------------------------------ one phase, said once


def test_the_prefills_decision_is_said_at_decode_registration_in_both_places():
    # SGLang 0.5.23: the decode's receiver registers once per prefill rank, on its first
    # request to it; the prefill's bootstrap thread decides there
    setup = _function_source("sglang.srt.disaggregation.common.conn", "CommonKVReceiver._setup_bootstrap_infos")
    assert "self._register_kv_args()" in setup and "connection_pool" in setup
    thread = _function_source("sglang.srt.disaggregation.nixl.conn", "NixlKVManager._start_bootstrap_thread")
    assert 'room == "None"' in thread and "self._add_remote_peer(" in thread
    assert "self._prepare_payload_xfer(" in _function_source(
        "sglang.srt.disaggregation.nixl.conn", "NixlKVManager._add_remote_peer"
    )
    entry = load_catalog().get("region-count")
    assert entry.when == "decode registration"
    result = explain_text("ValueError: " + entry.format(n_dst=61, n_src=62))
    f = result.report.first_cause
    assert f is not None and f.id == "region-count" and f.phase == "decode-registration"
    words = when_words(entry.when)
    assert "decode registration" in words and "first request to this prefill rank" in words
    out = render_explanation(result)
    cause_line = next(ln for ln in out.splitlines() if ln.startswith("first cause:"))
    entry_line = next(ln for ln in out.splitlines() if ln.startswith("region-count  ["))
    assert words in cause_line and words in entry_line
