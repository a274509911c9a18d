"""The DSA KV cache dtype as SGLang 0.5.23 resolves it, and the decode's check on it.

Every expected value comes from SGLang's own code on CPU: the dtype from
``arg_groups/overrides.py`` ``_dsa_kv_cache_dtype_default`` with the GPU's compute
capability standing in for ``torch.cuda.get_device_capability``, and the verdict from
the decode's ``try_ensure_parallel_info`` (the runtime kernel) on the strings the runtime
resolved. DeepSeek V3.2 pairs: ``bf16`` against unset transfers cleanly below SM100 and
fails from SM100 on.
"""

from __future__ import annotations

import json
from types import SimpleNamespace

import pytest

pytest.importorskip("sglang")

from helpers import model_dir, write_config  # noqa: E402
from kvcheck.preflight import pair_info, run_preflight  # noqa: E402
from kvcheck.sglang.geometry import derive_geometry  # noqa: E402
from kvcheck.sglang.resolved import kv_dtype  # noqa: E402
from kvcheck.sources import load_side  # noqa: E402

pytestmark = pytest.mark.runtime

GPUS = {"h100": (9, 0), "b200": (10, 0), "sm120": (12, 0)}
FLAGS = [None, "auto", "bf16", "bfloat16", "fp8_e4m3"]


@pytest.fixture(scope="module")
def runtime_dtype():
    """SGLang 0.5.23's own DSA dtype default, on a given compute capability."""
    import torch
    from sglang.srt.arg_groups import overrides

    hf = json.loads((model_dir("deepseek-v3.2") / "config.json").read_text())
    hf_config = SimpleNamespace(**hf)

    def resolve(flag: str | None, capability: tuple[int, int]) -> str:
        mp = pytest.MonkeyPatch()
        try:
            mp.setattr(overrides, "model_config_of", lambda view: SimpleNamespace(hf_config=hf_config))
            mp.setattr(torch.cuda, "get_device_capability", lambda *a, **k: capability)
            view = SimpleNamespace(kv_cache_dtype=flag or "auto", dsa_prefill_backend=None, dsa_decode_backend=None)
            return overrides._dsa_kv_cache_dtype_default(view).get("kv_cache_dtype", view.kv_cache_dtype)
        finally:
            mp.undo()

    return resolve


def _side(tmp_path, role, flag, gpu):
    args = {"disaggregation-mode": role, "disaggregation-transfer-backend": "nixl", "tp-size": 8, "page-size": 64}
    if flag:
        args["kv-cache-dtype"] = flag
    path = write_config(tmp_path, f"{role}-{flag}-{gpu}", "deepseek-v3.2", args)
    return load_side(str(path), role, gpu=gpu, sglang_version="0.5.23")


@pytest.mark.parametrize("gpu", sorted(GPUS))
@pytest.mark.parametrize("flag", FLAGS)
def test_dsa_kv_dtype_is_the_runtimes(tmp_path, runtime_dtype, flag, gpu):
    side = _side(tmp_path, "prefill", flag, gpu)
    got = kv_dtype(side)
    assert got.server_args == got.runner == runtime_dtype(flag, GPUS[gpu])


@pytest.mark.parametrize("gpu", ["h100", "b200"])
@pytest.mark.parametrize("p_flag,d_flag", [("bf16", None), (None, "bfloat16"), ("fp8_e4m3", None), ("bf16", "bfloat16"), ("fp8_e4m3", "bf16")])
def test_dsa_pairs_match_the_runtime_check(tmp_path, runtime_dtype, p_flag, d_flag, gpu):
    """kvcheck's verdict on the dtype check equals the runtime's on the runtime's strings."""
    from kvcheck.sglang import runtime_kernel as rk
    from kvcheck.sglang.pd_release import behaviour

    p, d = _side(tmp_path, "prefill", p_flag, gpu), _side(tmp_path, "decode", d_flag, gpu)
    p_info, d_info = pair_info(p, derive_geometry(p)), pair_info(d, derive_geometry(d))
    p_rt, d_rt = runtime_dtype(p_flag, GPUS[gpu]), runtime_dtype(d_flag, GPUS[gpu])
    want = rk.bootstrap_error(p_info.model_copy(update={"kv_cache_dtype_str": p_rt}), d_info.model_copy(update={"kv_cache_dtype_str": d_rt}), behaviour("0.5.23"))
    report = run_preflight(p, d, kernel="runtime")
    mismatch = [f for f in report.findings if f.id == "kv-cache-dtype-mismatch"]
    if want is None:
        assert not mismatch and report.verdict in ("pass", "warn"), [f.message for f in report.findings]
    else:
        assert mismatch and mismatch[0].runtime_error.message == want.message
        assert f"kv_cache_dtype={p_rt}" in mismatch[0].message and f"kv_cache_dtype={d_rt}" in mismatch[0].message


def test_bf16_vs_unset_passes_on_hopper_and_transfers_every_region(tmp_path):
    p, d = _side(tmp_path, "prefill", "bf16", "h100"), _side(tmp_path, "decode", None, "h100")
    report = run_preflight(p, d, kernel="runtime")
    assert report.verdict in ("pass", "warn") and report.plan is not None and report.plan.error is None
    assert report.plan.n_src == report.plan.n_dst == derive_geometry(p).n


def test_unknown_gpu_decides_both_gpu_kinds(tmp_path, runtime_dtype):
    """No GPU given: bf16 against unset passes below SM100 and fails from SM100, so the
    pair is unchecked, never judged on the assumed Hopper; with both unset it passes on both."""
    def unassumed(role, flag):
        path = write_config(tmp_path, f"{role}-{flag}-none", "deepseek-v3.2",
                            {"disaggregation-mode": role, "disaggregation-transfer-backend": "nixl", "tp-size": 8, "page-size": 64, **({"kv-cache-dtype": flag} if flag else {})})
        return load_side(str(path), role, sglang_version="0.5.23")

    report = run_preflight(unassumed("prefill", "bf16"), unassumed("decode", None), kernel="builtin")
    f = [x for x in report.findings if x.id == "kv-dtype-gpu"]
    assert report.verdict == "unchecked" and f and not [x for x in report.findings if x.id == "kv-cache-dtype-mismatch"]
    blackwell = runtime_dtype(None, GPUS["b200"])
    assert f"prefill server has kv_cache_dtype={runtime_dtype('bf16', GPUS['b200'])}, but decode server has kv_cache_dtype={blackwell}" in f[0].message
    both = run_preflight(unassumed("prefill", None), unassumed("decode", None), kernel="builtin")
    assert not [x for x in both.findings if x.id in ("kv-dtype-gpu", "kv-cache-dtype-mismatch")]
