"""``page-size-unpinned``: a page size left to the attention backend is a risk only when a
side's GPU was not given. Values from SGLang 0.5.23's ``ServerArgs``: a dense Llama on
Hopper resolves the attention backend to ``fa3`` (``_get_default_attn_backend``) and keeps
page size 1; with both GPUs named, the resolved page sizes are compared by
``page-size-mismatch`` instead."""

from __future__ import annotations

from tests.helpers import preflight_json

BASE = {"disaggregation-transfer-backend": "nixl"}


def _unpinned(report: dict) -> list[dict]:
    return [f for f in report["findings"] if f["id"] == "page-size-unpinned"]


def test_no_gpu_given_names_what_the_page_size_resolves_to(tmp_path):
    code, report = preflight_json(tmp_path, "llama-3.1-8b", {**BASE, "disaggregation-mode": "prefill"}, {**BASE, "disaggregation-mode": "decode"})
    found = _unpinned(report)
    assert code == 0 and len(found) == 2
    prefill = next(f for f in found if "prefill: --page-size is not set" in f["message"])
    assert "resolves to 1 with attention backend fa3 on h100 (assumed: no GPU given)" in prefill["message"]
    assert not prefill["message"].rstrip().endswith(";")


def test_both_gpus_given_no_risk_left(tmp_path):
    code, report = preflight_json(tmp_path, "llama-3.1-8b", {**BASE, "disaggregation-mode": "prefill"}, {**BASE, "disaggregation-mode": "decode"}, "--gpu", "h100")
    assert code == 0 and report["verdict"] == "pass" and _unpinned(report) == []
