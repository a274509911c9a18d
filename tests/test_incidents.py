"""Public SGLang PD incidents, each re-built as a kvcheck input pair and judged.

Every case is written by us in the real input formats (SGLang ``--config`` YAML, a
``config.json`` of the incident model's KV shape with fewer layers) and runs through
``run_preflight`` with the release the incident ran. The expected outcome is the one the
incident reports, and it is tied to the runtime: the release's own source where it is
installed beside this Python (``<venv>/sglang-releases/X``, see
``scripts/setup-test-env.sh``; those asserts skip without it), the runtime kernel driving
that release's own ``_add_remote_peer`` in a separate process, and a real NIXL agent.

* sgl-project/sglang#31295 — Qwen3.5 (2 KV heads), prefill TP4 + DP-attention (attention
  TP 1) -> decode TP4 (attention TP 4), NIXL, B200. A 2026-07 nightly between 0.5.16 and
  0.5.17: the prefill's bootstrap thread dies in ``prep_xfer_dlist`` with
  ``nixlNotFoundError: NIXL_ERR_NOT_FOUND`` (NIXL logs ``prepXferDlist: failed to prepare
  the descriptors ... for agent ''``); the first request times out after 300 s. Same code in
  every release 0.5.13 .. 0.5.16; fixed in 0.5.17 (sgl-project/sglang#31968).
* sgl-project/sglang#38552 — gpt-oss-120b (SWA hybrid, 8 KV heads), prefill TP1 -> decode
  TP4, NIXL. The prefill's transfer worker raises ``RuntimeError: PD Disaggregation does
  NOT support PD different TP sizes for non-MLA SWA hybrid models yet.`` from
  ``maybe_send_extra`` (nixl/conn.py line 2062, called from ``transfer_worker`` line 1153:
  exactly SGLang 0.5.16's lines); the client gets HTTP 500 and the decode aborts the room.
  Raised by every release 0.5.9 .. 0.5.21; 0.5.22 slices the SWA state by head.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import REPO

RELEASES = Path(os.environ.get("KVCHECK_SGLANG_RELEASES_DIR") or (Path(sys.prefix) / "sglang-releases"))

# Qwen3.5-397B-A17B's KV shape (text_config of its config.json): 2 KV heads of 256, GDN
# linear attention with 16 key / 64 value heads of 128, every 4th layer full attention.
# Eight layers instead of sixty: the failure depends on heads and TP sizes, not depth.
QWEN35 = {
    "architectures": ["Qwen3_5MoeForConditionalGeneration"],
    "model_type": "qwen3_5_moe",
    "text_config": {
        "model_type": "qwen3_5_moe_text", "dtype": "bfloat16", "hidden_size": 4096,
        "num_hidden_layers": 8, "full_attention_interval": 4,
        "layer_types": ["linear_attention"] * 3 + ["full_attention"] + ["linear_attention"] * 3 + ["full_attention"],
        "num_attention_heads": 32, "num_key_value_heads": 2, "head_dim": 256,
        "linear_conv_kernel_dim": 4, "linear_key_head_dim": 128, "linear_num_key_heads": 16,
        "linear_num_value_heads": 64, "linear_value_head_dim": 128, "mamba_ssm_dtype": "float32",
        "num_experts": 64, "num_experts_per_tok": 8, "moe_intermediate_size": 512,
        "shared_expert_intermediate_size": 512, "vocab_size": 151936, "max_position_embeddings": 32768,
        "rms_norm_eps": 1e-6,
        "rope_parameters": {"rope_type": "default", "rope_theta": 10000000, "partial_rotary_factor": 0.25},
    },
}

# gpt-oss-120b's KV shape: 8 KV heads of 64, sliding window 128 on every other layer.
GPT_OSS = {
    "architectures": ["GptOssForCausalLM"], "model_type": "gpt_oss",
    "num_hidden_layers": 4, "layer_types": ["sliding_attention", "full_attention"] * 2,
    "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 64, "hidden_size": 2880,
    "sliding_window": 128, "num_local_experts": 32, "experts_per_token": 4, "intermediate_size": 2880,
    "vocab_size": 201088, "max_position_embeddings": 131072, "rms_norm_eps": 1e-5, "rope_theta": 150000,
    "torch_dtype": "bfloat16",
}


def _model(tmp: Path, name: str, config: dict) -> Path:
    d = tmp / name
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(config))
    return d


def _pair(tmp: Path, model: Path, prefill: dict, decode: dict, version: str, gpu: str):
    """(report, prefill side, decode side) for a pair of --config YAML files on ``version``."""
    from kvcheck.preflight import run_preflight
    from kvcheck.sources import load_side

    sides = []
    for role, args in (("prefill", prefill), ("decode", decode)):
        path = tmp / f"{role}-{version}.yaml"
        data = {"model-path": str(model), "disaggregation-mode": role, "disaggregation-transfer-backend": "nixl", **args}
        path.write_text(yaml.safe_dump(data, sort_keys=False))
        sides.append(load_side(str(path), role, gpu=gpu, sglang_version=version))
    return run_preflight(*sides), sides[0], sides[1]


def _errors(report) -> dict[str, object]:
    return {f.id: f for f in report.findings if f.severity.value == "error"}


def _conn(version: str) -> str:
    path = RELEASES / version / "sglang" / "srt" / "disaggregation" / "nixl" / "conn.py"
    if not path.exists():
        pytest.skip(f"SGLang {version} is not installed beside this Python ({RELEASES})")
    return path.read_text()


# ------------------------------------------------------ sgl-project/sglang#31295 (Qwen3.5)

# Prefill TP4 DP4 with DP attention (attention TP 1); decode TP4 (attention TP 4). Both
# pin trtllm_mha and page 64: left to SGLang on B200 the prefill resolves triton with
# page 1 (radix cache on) and the decode trtllm_mha with page 64 - a page-size refusal
# that the incident did not hit, since its first request reached the registration.
Q35_PREFILL = {"tp-size": 4, "dp-size": 4, "enable-dp-attention": True, "attention-backend": "trtllm_mha", "page-size": 64}
# 0.5.22 on: --enable-dp-attention is deprecated and refused in a --config file;
# --attn-dp-size 4 is the same layout (attention TP 1).
Q35_PREFILL_NEW = {"tp-size": 4, "attn-dp-size": 4, "attention-backend": "trtllm_mha", "page-size": 64}
Q35_DECODE = {"tp-size": 4, "attention-backend": "trtllm_mha", "page-size": 64}


@pytest.mark.parametrize("version", ["0.5.13", "0.5.14", "0.5.15", "0.5.16"])
def test_qwen35_attention_tp1_into_tp4_fails_at_registration_on_0_5_13_to_0_5_16(tmp_path, version):
    model = _model(tmp_path, "qwen3.5", QWEN35)
    report, p, d = _pair(tmp_path, model, Q35_PREFILL, Q35_DECODE, version, "b200")
    assert (p.args.attn_tp_size, d.args.attn_tp_size) == (1, 4)
    errors = _errors(report)
    assert report.verdict == "fail"
    rt = errors["head-slice-overrun"].runtime_error
    assert (rt.type, rt.message, rt.when) == ("nixlNotFoundError", "NIXL_ERR_NOT_FOUND", "decode registration")
    assert "bootstrap thread" in rt.raised_by and "300 s" in rt.operator_sees
    assert "2 KV heads" in errors["head-slice-overrun"].message
    known = errors["known-issue"]
    assert "sglang-nixl-hetero-tp-replicated-heads-overrun" in known.message and "issues/31295" in known.message
    assert "on the prefill " in known.message  # the defect is the prefill's code


@pytest.mark.parametrize("version", ["0.5.22", "0.5.23"])
def test_qwen35_attention_tp1_into_tp4_passes_where_heads_and_state_are_sliced(tmp_path, version):
    model = _model(tmp_path, "qwen3.5", QWEN35)
    report, p, _ = _pair(tmp_path, model, Q35_PREFILL_NEW, Q35_DECODE, version, "b200")
    assert p.args.attn_tp_size == 1
    assert report.verdict in ("pass", "warn"), [(f.id, f.message) for f in report.findings]
    assert report.plan.path == "hetero_tp_slice"
    paths = {s["state_type"]: s["path"] for s in report.extra["state_components"]}
    assert paths == {"mamba": "mamba_slice"}


def test_qwen35_on_0_5_17_is_not_the_overrun(tmp_path):
    """0.5.17 fixed the group count; its decision is not restated, so the pair is
    unchecked (exit 4), never the 0.5.16 failure and never a pass."""
    model = _model(tmp_path, "qwen3.5", QWEN35)
    report, _, _ = _pair(tmp_path, model, Q35_PREFILL, Q35_DECODE, "0.5.17", "b200")
    assert "head-slice-overrun" not in _errors(report)
    assert not any("replicated-heads" in f.message for f in report.findings)
    assert report.verdict == "unchecked"


def test_qwen35_source_of_each_release_has_the_group_count_kvcheck_restates():
    """The one line that decides it: 0.5.13/0.5.16 count one group per decode rank,
    0.5.17 and 0.5.22 divide by the replication of the decode's KV heads."""
    for version in ("0.5.13", "0.5.16"):
        text = _conn(version)
        assert "num_groups = decode_tp_size // prefill_tp_size\n" in text and "dst_replication" not in text
        assert 'self.agent.prep_xfer_dlist("", src_array' in text or "prep_xfer_dlist(\n" in text
    for version in ("0.5.17", "0.5.22"):
        assert "num_groups = decode_tp_size // prefill_tp_size // dst_replication" in _conn(version)


_KERNEL_SNIPPET = r"""
import json, sys
from pathlib import Path
from kvcheck.preflight import run_preflight
from kvcheck.sglang.geometry import derive_geometry
from kvcheck.sglang.pd_release import behaviour as pd_behaviour
from kvcheck.sglang import runtime_kernel
from kvcheck.sources import load_side
import sglang
tmp = Path(sys.argv[1]); version = sys.argv[2]
p = load_side(str(tmp / f"prefill-{version}.yaml"), "prefill", gpu="b200", sglang_version=version)
d = load_side(str(tmp / f"decode-{version}.yaml"), "decode", gpu="b200", sglang_version=version)
plan = runtime_kernel.decide_transfer(derive_geometry(p), derive_geometry(d), total_kv_heads=p.model.num_key_value_heads, behaviour=pd_behaviour(version))
print(json.dumps({"imported": sglang.__version__, "error": plan.error.model_dump() if plan.error else None, "path": plan.path}))
"""


@pytest.mark.runtime
@pytest.mark.parametrize("version", ["0.5.13", "0.5.16", "0.5.17"])
def test_qwen35_runtime_kernel_drives_the_release_and_agrees(tmp_path, version):
    """The runtime kernel runs that release's own ``_add_remote_peer`` ->
    ``_init_hetero_tp_prep_handle`` (a separate process with only that release on the
    path) against an agent that checks local descriptors the way NIXL does."""
    if not (RELEASES / version / "sglang").exists():
        pytest.skip(f"SGLang {version} is not installed beside this Python")
    model = _model(tmp_path, "qwen3.5", QWEN35)
    builtin, _, _ = _pair(tmp_path, model, Q35_PREFILL, Q35_DECODE, version, "b200")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(RELEASES / version), str(RELEASES / "_deps"), str(REPO), str(REPO / "tests" / "stubs")]))
    proc = subprocess.run([sys.executable, "-c", _KERNEL_SNIPPET, str(tmp_path), version], env=env, capture_output=True, text=True, timeout=600, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["imported"] == version
    if version == "0.5.17":
        assert out["error"] is None and out["path"] == "hetero_tp_slice"
        assert "head-slice-overrun" not in _errors(builtin)
    else:
        assert (out["error"]["type"], out["error"]["message"]) == ("nixlNotFoundError", "NIXL_ERR_NOT_FOUND")
        rt = _errors(builtin)["head-slice-overrun"].runtime_error
        assert (rt.type, rt.message) == (out["error"]["type"], out["error"]["message"])


_NIXL_SNIPPET = r"""
import ctypes, json
import numpy as np
from kvcheck.nixl.runtime import load_nixl
from kvcheck.sglang.runtime_kernel import _RecordingAgent
api = load_nixl()
agent = api.nixl_agent("kvcheck-incident", api.nixl_agent_config(backends=["UCX"]))
buf = (ctypes.c_uint8 * 4096)()
ptr = ctypes.addressof(buf)
agent.register_memory(agent.get_reg_descs([(ptr, 4096, 0, "")], "DRAM"))
stand_in = _RecordingAgent("stand-in", regions=[(ptr, 4096)])
out = {}
# one token of 1024 bytes holding 2 KV heads; 4 groups of one head each (0.5.16's count
# for a decode at TP 4) vs 2 groups (0.5.17's, with replication 2)
for name, groups in (("fits", 2), ("overrun", 4)):
    rows = [[ptr + 3072 + g * 512, 512, 0] for g in range(groups)]
    arr = np.array(rows, dtype=np.uint64)
    res = []
    for a in (agent, stand_in):
        try:
            a.prep_xfer_dlist("", arr, "DRAM")
            res.append("ok")
        except Exception as exc:
            res.append(f"{type(exc).__name__}: {exc}")
    out[name] = res
print(json.dumps(out))
"""


@pytest.mark.nixl
def test_real_nixl_refuses_a_local_descriptor_past_the_registered_region():
    """A real NIXL agent (separate process) and the runtime kernel's stand-in agree: a
    local descriptor list that runs past the registered region raises
    ``nixlNotFoundError: NIXL_ERR_NOT_FOUND``; one inside it is prepared."""
    pytest.importorskip("numpy")
    try:
        from kvcheck.nixl.runtime import load_nixl

        load_nixl()
    except Exception as exc:  # noqa: BLE001
        pytest.skip(f"NIXL not installed: {exc}")
    env = dict(os.environ, UCX_LOG_LEVEL="error", PYTHONPATH=str(REPO))
    proc = subprocess.run([sys.executable, "-c", _NIXL_SNIPPET], env=env, capture_output=True, text=True, timeout=120, cwd=REPO)
    assert proc.returncode == 0, proc.stderr[-2000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["fits"] == ["ok", "ok"]
    assert out["overrun"] == ["nixlNotFoundError: NIXL_ERR_NOT_FOUND"] * 2


# ---------------------------------------------------- sgl-project/sglang#38552 (gpt-oss)

SWA_TEXT = "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet."


@pytest.mark.parametrize("version", ["0.5.9", "0.5.12.post1", "0.5.16", "0.5.18", "0.5.21"])
def test_gpt_oss_tp1_into_tp4_is_refused_on_the_first_request_before_0_5_22(tmp_path, version):
    model = _model(tmp_path, "gpt-oss", GPT_OSS)
    report, p, d = _pair(tmp_path, model, {"tp-size": 1}, {"tp-size": 4}, version, "h200")
    assert p.model.hybrid == "swa"
    assert report.verdict == "fail"
    errors = _errors(report)
    rt = errors["state-transfer"].runtime_error
    assert (rt.type, rt.message, rt.when) == ("RuntimeError", SWA_TEXT, "first request")
    assert "maybe_send_extra" in rt.raised_by and "HTTP 500" in rt.operator_sees
    assert "0.5.22" in errors["state-transfer"].fix
    # no false refusal on top of it (0.5.21's host-receive flag is off by default)
    assert set(errors) == {"state-transfer"}, sorted(errors)


@pytest.mark.parametrize("version", ["0.5.22", "0.5.23"])
def test_gpt_oss_tp1_into_tp4_passes_from_0_5_22(tmp_path, version):
    model = _model(tmp_path, "gpt-oss", GPT_OSS)
    report, _, _ = _pair(tmp_path, model, {"tp-size": 1}, {"tp-size": 4}, version, "h200")
    assert report.verdict in ("pass", "warn"), [(f.id, f.message) for f in report.findings]
    assert {s["state_type"]: s["path"] for s in report.extra["state_components"]} == {"swa": "swa_head_slice"}


def test_gpt_oss_before_0_5_9_stays_unchecked(tmp_path):
    """0.5.8's NIXL connector has no state path at all: not decided, so unchecked."""
    model = _model(tmp_path, "gpt-oss", GPT_OSS)
    report, _, _ = _pair(tmp_path, model, {"tp-size": 1}, {"tp-size": 4}, "0.5.8", "h200")
    assert report.verdict == "unchecked"
    assert "state-transfer" not in _errors(report)


def test_gpt_oss_equal_tp_is_not_refused(tmp_path):
    model = _model(tmp_path, "gpt-oss", GPT_OSS)
    report, _, _ = _pair(tmp_path, model, {"tp-size": 4}, {"tp-size": 4}, "0.5.16", "h200")
    assert "state-transfer" not in _errors(report)


def test_gpt_oss_release_sources_raise_or_slice():
    """0.5.16's maybe_send_extra raises at line 2062 (the incident's traceback line),
    called from transfer_worker at line 1153; 0.5.21 still raises for SWA; 0.5.22 has
    ``_send_swa_state_slice``. 0.5.10 also refuses Mamba state with unequal TP."""
    lines = _conn("0.5.16").splitlines()
    assert lines[2061].strip() == "raise RuntimeError("
    assert "non-MLA {st.upper()} hybrid models yet." in lines[2062]
    assert "self.maybe_send_extra(" in lines[1152]
    assert "def _send_swa_state_slice" not in _conn("0.5.21")
    assert "def _send_swa_state_slice" in _conn("0.5.22")
    assert "different TP sizes for hybrid mamba models yet." in _conn("0.5.10")


def test_mamba_hetero_tp_refused_on_0_5_10_sliced_from_0_5_11(tmp_path):
    model = _model(tmp_path, "qwen3.5", QWEN35)
    args_p = {"tp-size": 2, "attention-backend": "fa3", "page-size": 64}
    args_d = {"tp-size": 4, "attention-backend": "fa3", "page-size": 64}
    report, _, _ = _pair(tmp_path, model, args_p, args_d, "0.5.10", "h200")
    rt = _errors(report)["state-transfer"].runtime_error
    assert rt.message == "PD Disaggregation does NOT support PD different TP sizes for hybrid mamba models yet."
    report, _, _ = _pair(tmp_path, model, args_p, args_d, "0.5.11", "h200")
    assert "state-transfer" not in _errors(report)


def test_explain_recognizes_both_incident_messages():
    from kvcheck.explain.matcher import explain_text

    assert [h.entry_id for h in explain_text(f"RuntimeError: {SWA_TEXT}").hits][0] == "state-tp-unsupported"
    hits = explain_text("RuntimeError: PD Disaggregation does NOT support PD different TP sizes for hybrid mamba models yet.").hits
    assert hits[0].entry_id == "state-tp-unsupported-mamba"


# -------------------------------------------- false alarms found while replaying incidents

def test_0_5_21_host_receive_is_off_by_default(tmp_path):
    """0.5.21 introduced --disaggregation-decode-host-receive-threshold with default 0.0,
    on when > 0; 0.5.22 made it default 1.0, on when < 1. A plain 0.5.21 pair must not be
    refused for host receive; a 0.5.21 decode with 0.5 is (no built-in backend supports
    host destinations)."""
    model = _model(tmp_path, "gpt-oss", GPT_OSS)
    report, _, _ = _pair(tmp_path, model, {"tp-size": 2}, {"tp-size": 2}, "0.5.21", "h200")
    assert not {"decode-host-destination", "decode-host-pool-role"} & set(_errors(report))
    report, _, _ = _pair(tmp_path, model, {"tp-size": 2}, {"tp-size": 2, "disaggregation-decode-host-receive-threshold": 0.5}, "0.5.21", "h200")
    rt = _errors(report)["decode-host-destination"].runtime_error
    assert rt.message == "Transfer backend does not support decode host KV destinations"
    report, _, _ = _pair(tmp_path, model, {"tp-size": 2}, {"tp-size": 2}, "0.5.23", "h200")
    assert "decode-host-destination" not in _errors(report)
    src = RELEASES / "0.5.21" / "sglang" / "srt"
    if not src.exists():
        pytest.skip("SGLang 0.5.21 is not installed beside this Python")
    fields = (src / "arg_groups" / "fields" / "disagg.py").read_text()
    assert "disaggregation_decode_host_receive_threshold: A[" in fields
    block = fields.split("disaggregation_decode_host_receive_threshold: A[", 1)[1].split("\n    ]", 1)[1]
    assert block.lstrip().startswith("= 0.0")
    assert "disaggregation_decode_host_receive_threshold > 0\n            and not kv_manager.supports_host_destination" in (src / "disaggregation" / "decode.py").read_text()


def test_0_5_12_dense_hang_does_not_match_hybrid_models(tmp_path):
    """0.5.12 skips the aux notification only for requests without state indices (dense
    models); Qwen3.5 (Mamba state) and gpt-oss (SWA state) carry them."""
    for name, config, args in (("qwen3.5", QWEN35, {"tp-size": 4, "attention-backend": "trtllm_mha", "page-size": 64}),
                               ("gpt-oss", GPT_OSS, {"tp-size": 4})):
        model = _model(tmp_path, name, config)
        report, _, _ = _pair(tmp_path, model, args, args, "0.5.12", "b200")
        assert not any("0.5.12-nixl-dense-hang" in f.message for f in report.findings), name
    from helpers import model_dir

    report, _, _ = _pair(tmp_path, model_dir("llama-3.1-8b"), {"tp-size": 2}, {"tp-size": 2}, "0.5.12", "h200")
    assert any("0.5.12-nixl-dense-hang" in f.message for f in _errors(report).values())


@pytest.mark.runtime
def test_qwen35_dp_attention_prefill_on_b200_unpinned_resolves_unequal_page_sizes(tmp_path):
    """The same Qwen3.5 topology on B200 without --attention-backend/--page-size: SGLang
    0.5.23's own resolution (``_qwen3_5_hybrid_overrides``) gives the prefill (radix cache
    on) triton with page 1 and the decode (no radix cache) trtllm_mha with page 64, so the
    decode's bootstrap check refuses the pair. kvcheck predicts the same page sizes."""
    pytest.importorskip("sglang")
    from startup_corpus import gpu_facts

    from sglang.srt.arg_groups.overrides import resolution_result
    from sglang.srt.runtime_context import reset_context
    from sglang.srt.server_args import prepare_server_args

    model = _model(tmp_path, "qwen3.5", QWEN35)
    runtime = {}
    for role, extra in (("prefill", ["--tp-size", "4", "--attn-dp-size", "4"]), ("decode", ["--tp-size", "4"])):
        with gpu_facts((10, 0)):
            reset_context()
            sa = prepare_server_args(["--model-path", str(model), "--device", "cuda", "--disaggregation-mode", role,
                                      "--disaggregation-transfer-backend", "nixl"] + extra)
            sa.resolve_once()
            runtime[role] = (resolution_result(sa, "attention_backend"), resolution_result(sa, "page_size") or 1)
        reset_context()
    assert runtime == {"prefill": ("triton", 1), "decode": ("trtllm_mha", 64)}
    report, _, _ = _pair(tmp_path, model, {"tp-size": 4, "attn-dp-size": 4}, {"tp-size": 4}, "0.5.23", "b200")
    rt = _errors(report)["page-size-mismatch"].runtime_error
    assert rt.message == ("Page size mismatch: prefill server has page_size=1, but decode server has page_size=64. "
                          "Both servers must use the same --page-size value.")


# ------------------------------------------------------- dtype / page-size incidents

@pytest.mark.parametrize(("version", "verdict"), [("0.5.9", "fail"), ("0.5.10", "fail"), ("0.5.16", "fail"), ("0.5.23", "fail")])
def test_kv_cache_dtype_differs_bf16_prefill_fp8_decode(tmp_path, version, verdict):
    """sgl-project/sglang#19398: prefill bf16 KV, decode fp8_e4m3 KV; the transfer strides
    the decode by the prefill's item length: corrupt output, NIXL_ERR_NOT_FOUND under load.
    0.5.10 added the decode's bootstrap comparison; on 0.5.9 nothing raises and the decode's
    shorter items are overwritten (item-length-larger: silent corruption, an error)."""
    from helpers import model_dir

    report, _, _ = _pair(tmp_path, model_dir("llama-3.1-8b"), {"tp-size": 2, "page-size": 16, "kv-cache-dtype": "bfloat16"},
                         {"tp-size": 2, "page-size": 16, "kv-cache-dtype": "fp8_e4m3"}, version, "h200")
    assert report.verdict == verdict
    if version == "0.5.9":
        assert "item-length-larger" in _errors(report)
    else:
        assert _errors(report)["kv-cache-dtype-mismatch"].runtime_error.message.startswith(
            "KV cache dtype mismatch: prefill server has kv_cache_dtype=bfloat16, but decode server has kv_cache_dtype=fp8_e4m3")


@pytest.mark.runtime
@pytest.mark.parametrize("version", ["0.5.11", "0.5.12.post1"])
def test_qwen35_attention_tp1_into_tp4_silently_picks_wrong_heads_on_0_5_11_and_0_5_12(tmp_path, version):
    """Before the prepared lists (0.5.11 .. 0.5.12.post1) the same pair transfers without
    error, but decode ranks 1 and 2 receive the other KV head: the per-request slice picks
    ``(decode rank * heads per decode rank) % heads per prefill rank`` while the decode holds
    head ``rank // replicas``. The replicated map SGLang itself uses from 0.5.17
    (``compute_head_slice_params``, driven here) gives 0, 0, 1, 1."""
    pytest.importorskip("sglang")
    from sglang.srt.disaggregation.common.staging_buffer import compute_head_slice_params

    heads, p_tp, d_tp = 2, 1, 4
    right = [compute_head_slice_params(p_tp, d_tp, 0, r, heads)[0] for r in range(d_tp)]
    modulo = [(r * max(1, heads // d_tp)) % max(1, heads // p_tp) for r in range(d_tp)]  # 0.5.11 .. 0.5.16
    assert right == [0, 0, 1, 1] and modulo == [0, 1, 0, 1]
    model = _model(tmp_path, "qwen3.5", QWEN35)
    report, _, _ = _pair(tmp_path, model, Q35_PREFILL, Q35_DECODE, version, "b200")
    assert report.verdict == "fail"
    known = _errors(report)["known-issue"]
    assert "sglang-nixl-hetero-tp-replicated-heads-wrong-head" in known.message and "[corrupt" in known.message
    # a prefill rank holding one head (prefill attention TP 2 = KV heads) gets it right
    report, _, _ = _pair(tmp_path, model, {**Q35_DECODE, "tp-size": 2}, Q35_DECODE, version, "b200")
    assert not any("replicated-heads" in f.message for f in report.findings)


_GUIDE = """\
apiVersion: apps/v1
kind: Deployment
metadata: {{name: gptoss-{role}}}
spec:
  replicas: {replicas}
  selector: {{matchLabels: {{app: gptoss-{role}}}}}
  template:
    metadata: {{labels: {{app: gptoss-{role}}}}}
    spec:
      containers:
      - name: sglang
        image: docker.io/lmsysorg/sglang:{tag}
        command: ["python3", "-m", "sglang.launch_server"]
        args: ["--model-path", "openai/gpt-oss-120b", "--disaggregation-mode", "{role}",
               "--disaggregation-transfer-backend", "nixl", "--tp-size", "{tp}", "--port", "8000"]
        resources: {{limits: {{nvidia.com/gpu: {tp}}}}}
"""


@pytest.mark.parametrize(("tag", "exit_code"), [("v0.5.16", 1), ("v0.5.23", 0)])
def test_gpt_oss_guide_manifest_release_read_from_the_image(tmp_path, tag, exit_code):
    """llm-d/llm-d#2433: the guide's manifests (prefill TP1 x8, decode TP4 x2) on
    lmsysorg/sglang:v0.5.16 never passed; the release comes from the image tag, the model
    from kvcheck's catalog (openai/gpt-oss-120b)."""
    from helpers import run_cli

    text = _GUIDE.format(role="prefill", replicas=8, tag=tag, tp=1) + "---\n" + _GUIDE.format(role="decode", replicas=2, tag=tag, tp=4)
    path = tmp_path / "pd.yaml"
    path.write_text(text)
    proc = run_cli("preflight", "-f", str(path), "--gpu", "h200", "-o", "json", timeout=120)
    report = json.loads(proc.stdout)
    assert proc.returncode == exit_code, proc.stdout[-2000:]
    messages = [(f.get("runtime_error") or {}).get("message") for p in report["pairs"] for f in p["findings"]]
    assert (SWA_TEXT in messages) == (exit_code == 1)
