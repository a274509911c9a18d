"""The source line pasted under a traceback frame decides which releases the traceback fits
(``line_digests.json.gz``, from the wheels), not the line number alone (issue 20, r11-05)."""

from __future__ import annotations

import importlib.metadata
import importlib.util
import shutil
from pathlib import Path

import pytest

from kvcheck.explain import explain_text
from kvcheck.explain import linedigests
from kvcheck.explain.logrelease import load_index

UTILS = "srt/disaggregation/common/utils.py"


def _installed(srt_file: str) -> tuple[str, list[str]]:
    spec = importlib.util.find_spec("sglang")
    assert spec is not None and spec.origin
    path = Path(spec.origin).parent / srt_file
    return importlib.metadata.version("sglang"), path.read_text(encoding="utf-8").splitlines()


def _frame_in(version: str, func: str, lines: list[str]) -> tuple[int, str]:
    """A line of ``func`` in the installed release, with code on it (1-based number, text)."""
    index = load_index()
    t = index["files"][version][UTILS]
    a, b = index["tables"][t][func][0]
    n = next(i for i in range(a + 1, b + 1) if lines[i - 1].strip() and not lines[i - 1].strip().startswith("#"))
    return n, lines[n - 1].strip()


def _report(path_line: str, src: str, exc: str = "KeyError: 'x'"):
    text = f"Traceback (most recent call last):\n{path_line}\n    {src}\n{exc}\n"
    return explain_text(text, source="log").report


def test_the_installed_release_fits_its_own_source_line_and_not_another():
    version, lines = _installed(UTILS)
    if version not in load_index()["releases"]:
        pytest.skip(f"installed SGLang {version} is not indexed")
    n, src = _frame_in(version, "group_concurrent_contiguous", lines)
    frame = f'  File "/usr/lib/python3/dist-packages/sglang/{UTILS}", line {n}, in group_concurrent_contiguous'
    assert version in linedigests.releases_fitting(UTILS, n, src)
    rep = _report(frame, src)
    assert version in rep.release.candidates
    # the same frame under a line the file never had at that number: that release no longer fits
    other = "raise RuntimeError('a line written for this test')"
    assert version not in linedigests.releases_fitting(UTILS, n, other)
    assert version not in _report(frame, other).release.candidates


# SGLang 0.5.4's disaggregation/nixl/conn.py, NixlKVManager._handle_node_failure, line 234 (the
# line PR #12234 replaced); its caller heartbeat_checker at line 219
NIXL = "srt/disaggregation/nixl/conn.py"
LINE_234 = "if failed_bootstrap_addr in self.prefill_tp_size_table:"


def test_a_pasted_line_older_than_the_index_names_its_releases_and_the_first_without_it():
    fits = linedigests.releases_fitting(NIXL, 234, LINE_234)
    assert "0.5.4" in fits and not set(fits) & set(load_index()["releases"])
    text = (
        "Traceback (most recent call last):\n"
        f'  File "/sgl-workspace/sglang/python/sglang/{NIXL}", line 219, in heartbeat_checker\n'
        "    self._handle_node_failure(bootstrap_addr)\n"
        f'  File "/sgl-workspace/sglang/python/sglang/{NIXL}", line 234, in _handle_node_failure\n'
        f"    {LINE_234}\n"
        "AttributeError: 'NixlKVManager' object has no attribute 'prefill_tp_size_table'\n"
    )
    rep = explain_text(text, source="log").report
    assert rep.release.candidates == fits
    f = rep.first_cause
    assert f.phase == "after-peer-restart"
    # 0.5.4.post2's _handle_node_failure (conn.py:234) reads self.prefill_attn_tp_size_table: the
    # first release without the pasted line, followed through the table's copies
    gone = linedigests.follow(NIXL, 234, LINE_234, fits[-1])
    assert gone is not None and gone.gone == "0.5.4.post2" and gone.last == fits[-1] == "0.5.4.post1"
    assert "from SGLang 0.5.4.post2 on" in f.cause and "upgrade to 0.5.4.post2 or later" in f.fix
    assert "Likely fixed" in f.fix and "not a known fix" in f.fix


@pytest.mark.skipif(not Path("/tmp/sgl/0.5.23/sglang").is_dir() or shutil.which("python") is None, reason="no wheels")
def test_the_table_is_up_to_date_with_the_wheels():
    import subprocess
    import sys

    root = Path(__file__).resolve().parent.parent
    r = subprocess.run(
        [sys.executable, str(root / "scripts/gen_explain_line_digests.py"), "--tree", "/tmp/sgl", "--check"],
        capture_output=True,
        text=True,
        timeout=120,
    )
    assert r.returncode == 0, r.stdout + r.stderr
