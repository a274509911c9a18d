"""Mooncake pairs (SGLang's default backend) and the backends kvcheck does not model.

What a Mooncake pair gets comes from ``kvcheck.sglang.mooncake`` (the restated decision);
the conformance test below drives SGLang's own ``MooncakeKVManager.transfer_worker`` on a
seeded corpus and requires the same writes, texts and verdicts. The pair tests rebuild
pairs of SGLang's own PD test suite (``test/srt/test_disaggregation_pp.py`` and
``test_disaggregation.py``, whose base class ``TestDisaggregationBase`` runs them on
``--disaggregation-transfer-backend mooncake`` with ``--disaggregation-ib-device``), which
SGLang's CI holds to a GSM8K score, so they must pass.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

from helpers import REPO, model_dir, run_cli, write_config

# DEFAULT_MODEL_NAME_FOR_TEST of the release's test_utils: Llama 3.1 8B Instruct.
LLAMA = "llama-3.1-8b"
IB = "mlx5_1,mlx5_2,mlx5_3,mlx5_4"


def _pair(tmp: Path, prefill: dict, decode: dict, *extra: str, model: str = LLAMA, env: dict | None = None):
    p = write_config(tmp, "prefill", model, {"disaggregation-mode": "prefill", **prefill})
    d = write_config(tmp, "decode", model, {"disaggregation-mode": "decode", **decode})
    args = ["preflight", "--prefill", str(p), "--decode", str(d), "--format", "json", "--kernel", "builtin", *extra]
    if env:
        envf = tmp / "pd.env"
        envf.write_text("".join(f"{k}={v}\n" for k, v in env.items()))
        args += ["--env", str(envf)]
    proc = run_cli(*args)
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _script(tmp: Path, prefill: str, decode: str, env: str = "") -> int | dict:
    m = model_dir(LLAMA)
    path = tmp / "pd.sh"
    path.write_text(
        f"{env}python3 -m sglang.launch_server --model-path {m} --disaggregation-mode prefill {prefill} --port 30000 &\n"
        f"{env}python3 -m sglang.launch_server --model-path {m} --disaggregation-mode decode {decode} --port 30001 &\n"
    )
    # the release the pair helper pins (helpers.PAIR_TEST_RELEASE): both paths on one release
    proc = run_cli("preflight", "-f", str(path), "--format", "json", "--kernel", "builtin", "--sglang-version", "0.5.23")
    assert proc.stdout, proc.stderr
    return proc.returncode, json.loads(proc.stdout)


def _ids(report: dict) -> list[str]:
    """Every finding id of a pair report (``findings``) or an -f report (each pair's, then
    the deployment's own)."""
    return [f["id"] for pair in report.get("pairs") or [] for f in pair["findings"]] + [
        f["id"] for f in report.get("findings", [])
    ]


def test_sglang_pp_test_passes_on_both_input_paths(tmp_path):
    """test_disaggregation_pp.py (0.5.23): TP2 PP2 prefill with --enable-dynamic-chunking into
    a TP2 decode. Mooncake slices the decode's K/V halves from the stage's start layer
    (get_mha_kv_ptrs_with_pp): both stages land on their layers."""
    rc, rep = _pair(tmp_path, {"tp-size": 2, "pp-size": 2, "enable-dynamic-chunking": True, "disaggregation-ib-device": IB},
                    {"tp-size": 2, "base-gpu-id": 4, "disaggregation-ib-device": IB})
    assert rc == 0, [f["message"] for f in rep["findings"]]
    assert "pp-layer-pairing" not in _ids(rep) and rep["plan"]["path"] == "equal_tp"
    rc2, rep2 = _script(tmp_path, f"--tp-size 2 --pp-size 2 --enable-dynamic-chunking --disaggregation-ib-device {IB}",
                        f"--tp-size 2 --base-gpu-id 4 --disaggregation-ib-device {IB}")
    assert rc2 == 0, _ids(rep2)
    assert "backend-not-modeled" not in _ids(rep2)


@pytest.mark.parametrize("prefill,decode,model,path", [
    ({"tp-size": 1}, {"tp-size": 1}, LLAMA, "equal_tp"),  # test_disaggregation.py: TP1 -> TP1
    ({"tp-size": 2}, {"tp-size": 4}, LLAMA, "hetero_tp_slice"),  # test_disaggregation_different_tp.py (MHA): 2 -> 4
    ({"tp-size": 4}, {"tp-size": 2}, LLAMA, "hetero_tp_slice"),  # and 4 -> 2
    ({"tp-size": 2}, {"tp-size": 4}, "deepseek-v3", "mla"),  # the MLA variant (DeepSeek): latent KV replicated
])
def test_sglang_pd_tests_pass(tmp_path, prefill, decode, model, path):
    rc, rep = _pair(tmp_path, {**prefill, "page-size": 64, "disaggregation-ib-device": "mlx5_roce0,mlx5_roce4"},
                    {**decode, "page-size": 64, "disaggregation-ib-device": "mlx5_roce0,mlx5_roce4"}, model=model)
    assert rc == 0, [f["message"] for f in rep["findings"]]
    assert rep["plan"]["path"] == path


def test_uneven_pp_split_is_silent_corruption(tmp_path):
    """A 17/15 prefill split into a PP1 decode: the decode's 32 layers are not a multiple of
    the stage's 17, so get_mha_kv_ptrs_with_pp takes the decode-only-draft branch and
    writes the stage's V halves into K regions (the conformance run shows SGLang's own
    worker writing those addresses). With the same split on a PP2 decode it passes."""
    rc, rep = _script(tmp_path, "--tp-size 2 --pp-size 2 --page-size 16", "--tp-size 2 --page-size 16", env="SGLANG_PP_LAYER_PARTITION=17,15 ")
    assert rc == 1, _ids(rep)
    msgs = [f["message"] for pair in rep["pairs"] for f in pair["findings"] if f["id"] == "mooncake-silent-corruption"]
    assert msgs and "prefill region 17 (layer 0 V) is written into decode region 17 (layer 17 K)" in msgs[0]
    rc, rep = _script(tmp_path, "--tp-size 2 --pp-size 2 --page-size 16", "--tp-size 2 --pp-size 2 --page-size 16", env="SGLANG_PP_LAYER_PARTITION=17,15 ")
    assert rc == 0, _ids(rep)


def test_other_backends_are_unchecked_and_mismatch_fails(tmp_path):
    rc, rep = _pair(tmp_path, {"disaggregation-transfer-backend": "mori"}, {"disaggregation-transfer-backend": "mori"})
    assert rc == 4 and "backend-unchecked" in _ids(rep)
    assert any("MORI" in f["message"] for f in rep["findings"])
    rc, rep = _pair(tmp_path, {}, {"disaggregation-transfer-backend": "nixl"})
    assert rc == 1
    f = next(f for f in rep["findings"] if f["id"] == "backend-mismatch")
    assert "prefill mooncake, decode nixl" in f["message"]


def test_a_mooncake_prefill_and_a_nixl_decode_fail_whatever_the_model(tmp_path):
    """The decode's first ZMQ message reaches the Mooncake prefill's bootstrap thread
    whatever the model is: with a model kvcheck cannot read the pair is unchecked, and the
    backend mismatch still fails it, on the pair path as on -f (one id: backend-mismatch)."""
    p, d = tmp_path / "p.yaml", tmp_path / "d.yaml"
    p.write_text("model-path: acme/no-such-model\ndisaggregation-mode: prefill\npage-size: 16\n")
    d.write_text(
        "model-path: acme/no-such-model\ndisaggregation-mode: decode\npage-size: 16\n"
        "disaggregation-transfer-backend: nixl\n"
    )
    proc = run_cli("preflight", "--prefill", str(p), "--decode", str(d), "-o", "json", "--sglang-version", "0.5.23")
    assert proc.returncode == 1, proc.stderr
    ids = {f["id"]: f for f in json.loads(proc.stdout)["findings"]}
    assert "unknown-model" in ids and ids["backend-mismatch"]["severity"] == "error"
    assert "prefill mooncake, decode nixl" in ids["backend-mismatch"]["message"]
    sh = tmp_path / "pd.sh"
    sh.write_text(
        "python3 -m sglang.launch_server --model-path acme/no-such-model --disaggregation-mode prefill --page-size 16 &\n"
        "python3 -m sglang.launch_server --model-path acme/no-such-model --disaggregation-mode decode --page-size 16 "
        "--disaggregation-transfer-backend nixl &\n"
    )
    proc = run_cli("preflight", "-f", str(sh), "-o", "json", "--sglang-version", "0.5.23")
    assert proc.returncode == 1, proc.stderr
    rep = json.loads(proc.stdout)
    assert {"backend-mismatch", "one-backend"} <= set(_ids(rep)), _ids(rep)


def test_ib_device_mapping_missing_a_gpu_refuses_start(tmp_path):
    ib = '{"0": "mlx5_0", "1": "mlx5_1"}'
    rc, rep = _pair(tmp_path, {"tp-size": 4, "disaggregation-ib-device": ib}, {"tp-size": 4})
    assert rc == 1
    f = next(f for f in rep["findings"] if f["id"] == "mooncake-ib-device")
    assert f["runtime_error"]["message"] == "No IB devices configured for GPU 2. Available GPUs: [0, 1]"
    assert f["runtime_error"]["when"] == "start-up"


@pytest.mark.runtime
def test_conformance_with_sglang_transfer_worker():
    """A seeded corpus through SGLang 0.5.23's own MooncakeKVManager.transfer_worker, in this
    process (SGLang is imported once for the runtime tests): 0 disagreements on writes,
    texts and verdicts. KVCHECK_MOONCAKE_RELEASES="0.5.10 0.5.17 ..." also runs installed
    older releases, each in its own process (tests/mooncake_conformance_worker.py)."""
    pytest.importorskip("sglang")
    import random

    sys.path.insert(0, str(REPO / "tests"))
    import mooncake_conformance_worker as w

    from kvcheck.sglang import mooncake as mc
    from kvcheck.sglang import mooncake_runtime as rk

    n = int(os.environ.get("KVCHECK_MOONCAKE_PAIRS", "150"))
    out = {"pairs": 0, "rank_pairs": 0, "not_modeled": 0, "outcomes": {}, "disagreements": [], "n_disagreements": 0}
    rng = random.Random(0)
    b = mc.behaviour("0.5.23")
    assert rk.runtime_version() == "0.5.23"
    for _ in range(n):
        w.compare_pair(rk, mc, b, *w.random_pair(rng), out)
    # and the send path that returns -1 (a prefill stage with more layers than the decode's
    # stage of another split): "Failed to send kv chunk", the session blacklisted
    pf = w._side("prefill", mla=False, tp=2, pp=2, stages=[(0, 2), (2, 5)], stage=1, page=2, item=256)
    dc = w._side("decode", mla=False, tp=2, pp=2, stages=[(0, 3), (3, 5)], stage=1, page=2, item=256)
    w.compare_pair(rk, mc, b, pf, dc, 1, 4, out)
    assert any(k.startswith("KVTransferError") for k in out["outcomes"])
    assert out["n_disagreements"] == 0, out["disagreements"][:3]
    assert out["pairs"] >= n * 0.9
    assert any(k.startswith("SilentCorruption") for k in out["outcomes"]) and "hetero_tp_slice" in out["outcomes"]
    assert any(k.startswith("RuntimeError") for k in out["outcomes"])
    for release in os.environ.get("KVCHECK_MOONCAKE_RELEASES", "").split():
        base = REPO / ".venv" / "sglang-releases"
        env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(base / release), str(base / "_deps"), str(REPO), str(REPO / "tests" / "stubs")])}
        proc = subprocess.run([sys.executable, str(REPO / "tests" / "mooncake_conformance_worker.py"), "--release", release, "--pairs", str(n)],
                              capture_output=True, text=True, env=env, timeout=900)
        assert proc.returncode == 0, proc.stderr[-3000:]
        res = json.loads(proc.stdout.strip().splitlines()[-1])
        assert res["imported"] == release and res["n_disagreements"] == 0, res["disagreements"][:3]


DSV4_FLAGS = [
    ({"tp_size": 4}, {"tp_size": 4}, 1),
    ({"tp_size": 8}, {"tp_size": 1}, 1),
    ({"tp_size": 4, "speculative_algorithm": "NEXTN"}, {"tp_size": 8, "speculative_algorithm": "NEXTN"}, 1),
    ({"tp_size": 4, "enable_deepseek_v4_fp4_indexer": True}, {"tp_size": 4}, 1),
]


def _dsv4_geometries(pf: dict, df: dict):
    sys.path.insert(0, str(REPO / "tests"))
    from test_dsv4_preflight import V4

    from kvcheck.sglang.args import ServerArgs
    from kvcheck.sglang.geometry import derive_geometry
    from kvcheck.sglang.model import parse_model_config
    from kvcheck.sides import Side

    def side(role, flags):
        args = ServerArgs(disaggregation_mode=role, disaggregation_transfer_backend="mooncake", **flags)
        return Side(role=role, args=args, raw_args=dict(flags), model=parse_model_config(V4), origin=f"{role}.yaml",
                    gpu="h200", gpu_source="--gpu", env={})

    return derive_geometry(side("prefill", pf)), derive_geometry(side("decode", df))


@pytest.mark.parametrize("pf,df,heads", DSV4_FLAGS)
def test_dsv4_kv_entries_conform_to_sglangs_transfer_worker(pf, df, heads):
    """DeepSeek V4 on Mooncake: its ratio-grouped KV entries (C4 KV, C4 indexer, C128 KV)
    go through ``get_mla_kv_ptrs_with_pp``'s equal-length fast path, entry i -> i at the
    prefill's item length; SGLang 0.5.23's own transfer worker issues the same writes, and
    an indexer of another item length on one side is the same silent corruption."""
    pytest.importorskip("sglang")
    sys.path.insert(0, str(REPO / "tests"))
    import mooncake_conformance_worker as w

    from kvcheck.sglang import mooncake as mc
    from kvcheck.sglang import mooncake_runtime as rk

    prefill, decode = _dsv4_geometries(pf, df)
    assert prefill.pool == decode.pool == "DSV4" and prefill.n == decode.n == 9
    out = {"pairs": 0, "rank_pairs": 0, "not_modeled": 0, "outcomes": {}, "disagreements": [], "n_disagreements": 0}
    w.compare_pair(rk, mc, mc.behaviour("0.5.23"), prefill, decode, 0, heads, out)
    assert out["n_disagreements"] == 0 and out["pairs"] == 1, out["disagreements"]
    corrupt = "enable_deepseek_v4_fp4_indexer" in pf
    assert any(k.startswith("SilentCorruption") for k in out["outcomes"]) == corrupt, out["outcomes"]


@pytest.mark.parametrize("fp4", [False, True])
def test_dsv4_mooncake_pair_is_decided_on_both_input_paths(tmp_path, fp4):
    """A DeepSeek V4 Pro Mooncake pair (the model named by its Hub id, from kvcheck's
    catalog) is decided, not unchecked: twins pass, and a prefill that alone packs its
    indexer as FP4 fails with the silent corruption, as a pair and as a script."""
    extra = " --enable-deepseek-v4-fp4-indexer" if fp4 else ""
    lines = [f"python3 -m sglang.launch_server --model-path deepseek-ai/DeepSeek-V4-Pro --disaggregation-mode {role} "
             f"--tp 8 --port {port}{extra if role == 'prefill' else ''} &\n" for role, port in (("prefill", 30000), ("decode", 30001))]
    script = tmp_path / "pd.sh"
    script.write_text("".join(lines))
    for role in ("prefill", "decode"):
        (tmp_path / f"{role}.sh").write_text(lines[role == "decode"])
    runs = [run_cli("preflight", "-f", str(script), "--format", "json", "--sglang-version", "0.5.23"),
            run_cli("preflight", "--prefill", str(tmp_path / "prefill.sh"), "--decode", str(tmp_path / "decode.sh"),
                    "--format", "json", "--sglang-version", "0.5.23")]
    for proc in runs:
        assert proc.stdout, proc.stderr
        report = json.loads(proc.stdout)
        assert (proc.returncode, report["verdict"]) == ((1, "fail") if fp4 else (0, "pass")), _ids(report)
        assert ("mooncake-silent-corruption" in _ids(report)) == fp4
        assert "mooncake-unchecked" not in _ids(report)


@pytest.mark.runtime
@pytest.mark.parametrize("ib,gpus", [
    ('{"0": "mlx5_0", "1": "mlx5_1"}', 4),
    ('{"0": "mlx5_0", "x": "mlx5_1"}', 1),
    ('{"0": 5}', 1),
    ("{not json", 1),
    ("[1, 2]", 1),
    ('{"0": "mlx5_0", "1": "mlx5_1", "2": "a", "3": "b"}', 4),
    ("mlx5_0,mlx5_1", 8),
])
def test_ib_device_texts_are_sglangs(ib, gpus, monkeypatch):
    """kvcheck's --disaggregation-ib-device refusals against SGLang 0.5.23's own
    get_ib_devices_for_gpu, GPU by GPU (the first one that fails is the server's)."""
    pytest.importorskip("sglang")
    from sglang.srt.distributed.device_communicators.mooncake_transfer_engine import get_ib_devices_for_gpu

    from kvcheck.checks.mooncake import _ib_findings
    from kvcheck.sglang.args import ServerArgs

    runtime = None
    for g in range(gpus):
        try:
            get_ib_devices_for_gpu(ib, g)
        except (ValueError, RuntimeError) as exc:
            runtime = f"{type(exc).__name__}: {exc}"
            break
    got = _ib_findings(type("S", (), {"args": ServerArgs(tp_size=gpus, disaggregation_ib_device=ib), "env": {}, "raw_args": {}})())
    assert (got[0] if got else None) == runtime


@pytest.mark.runtime
@pytest.mark.parametrize("env", [
    {"MOONCAKE_PROTOCOL": "efa", "SGLANG_MOONCAKE_CUSTOM_MEM_POOL": "NVLINK"},
    {"MOONCAKE_PROTOCOL": "efa", "SGLANG_MOONCAKE_CUSTOM_MEM_POOL": "true"},
    {"MOONCAKE_PROTOCOL": "efa", "PYTORCH_CUDA_ALLOC_CONF": "expandable_segments:True"},
    {"MOONCAKE_PROTOCOL": "rdma", "SGLANG_MOONCAKE_CUSTOM_MEM_POOL": "BAREX"},
])
def test_efa_texts_are_sglangs(env, monkeypatch):
    """The EFA start-up refusals against SGLang 0.5.23's _validate_efa_allocator_compatibility."""
    pytest.importorskip("sglang")
    from sglang.srt.disaggregation.mooncake import utils as mu

    from kvcheck.checks.mooncake import startup_refusals
    from kvcheck.sglang.args import ServerArgs

    for k, v in env.items():
        monkeypatch.setenv(k, v)
    try:
        mu._validate_efa_allocator_compatibility(*mu.check_mooncake_custom_mem_pool_enabled())
        runtime = None
    except ValueError as exc:
        runtime = f"ValueError: {exc}"
    side = type("S", (), {"args": ServerArgs(), "env": dict(env), "raw_args": {}, "role": "decode", "sglang_version": "0.5.23"})()
    got = [t for fid, t in startup_refusals(side) if fid == "mooncake-efa"]
    assert (got[0] if got else None) == runtime


@pytest.mark.runtime
def test_kernel_runtime_drives_sglangs_own_mooncake_worker(tmp_path):
    """``--kernel runtime`` on a Mooncake pair: the installed SGLang's own
    ``MooncakeKVManager.transfer_worker`` issues the writes (judged as the builtin's are),
    and a prefill on another release is unchecked with the reason, never answered by the
    builtin in its place."""
    env = {**os.environ, "PYTHONPATH": os.pathsep.join([str(REPO), str(REPO / "tests" / "stubs")])}
    m = model_dir(LLAMA)
    path = tmp_path / "pd.sh"
    path.write_text(
        f"SGLANG_PP_LAYER_PARTITION=17,15 python3 -m sglang.launch_server --model-path {m} --disaggregation-mode prefill --tp-size 2 --pp-size 2 --page-size 16 --port 30000 &\n"
        f"python3 -m sglang.launch_server --model-path {m} --disaggregation-mode decode --tp-size 2 --page-size 16 --port 30001 &\n")

    def run(kernel, release):
        proc = subprocess.run([sys.executable, "-m", "kvcheck", "preflight", "-f", str(path), "--format", "json", "--kernel", kernel, "--sglang-version", release],
                              capture_output=True, text=True, env=env, timeout=300, cwd=REPO)
        rep = json.loads(proc.stdout)
        return proc.returncode, rep, [f for p in rep["pairs"] for f in p["findings"] if f["severity"] in ("error", "unchecked")]

    rc, rep, bad = run("runtime", "0.5.23")
    assert rc == 1 and rep["kernel"] == "runtime", bad
    rt = sorted(f["message"] for f in bad if f["id"] == "mooncake-silent-corruption")
    _, _, bad_b = run("builtin", "0.5.23")
    assert rt and rt == sorted(f["message"] for f in bad_b if f["id"] == "mooncake-silent-corruption")
    rc, rep, bad = run("runtime", "0.5.9")
    assert rc == 4 and any(f["id"] == "mooncake-unchecked" and "--kernel runtime drives the installed SGLang 0.5.23, but the prefill runs 0.5.9" in f["message"] for f in bad), bad


@pytest.mark.parametrize("release,decode_tp,text", [
    ("0.5.9", 2, None),  # twin SWA layouts at PP 1: each state buffer goes to its twin
    ("0.5.9", 4, "PD Disaggregation does NOT support PD different TP sizes for non-MLA SWA hybrid models yet."),  # maybe_send_extra
    ("0.5.7", 4, "PD Disaggregation does NOT support PD different TP sizes for non-MLA hybrid models yet."),  # the worker's own check
])
def test_swa_states_before_0_5_17(tmp_path, release, decode_tp, text):
    """gpt-oss (SWA hybrid, MHA) on Mooncake before 0.5.17: maybe_send_extra's state send
    is decided for twin layouts and the releases' refusal across unequal TP kills the
    transfer worker with the release's own text."""
    path = tmp_path / "pd.sh"
    path.write_text(
        "python3 -m sglang.launch_server --model-path openai/gpt-oss-20b --disaggregation-mode prefill --tp-size 2 --page-size 64 --port 30000 &\n"
        f"python3 -m sglang.launch_server --model-path openai/gpt-oss-20b --disaggregation-mode decode --tp-size {decode_tp} --page-size 64 --port 30001 &\n")
    proc = run_cli("preflight", "-f", str(path), "--format", "json", "--kernel", "builtin", "--sglang-version", release, "--gpu", "h100")
    rep = json.loads(proc.stdout)
    found = [f for p in rep["pairs"] for f in p["findings"] if f["severity"] in ("error", "unchecked")]
    if text is None:
        assert proc.returncode == 0, found
    else:
        f = next(f for f in found if f["id"] == "mooncake-worker-dies")
        assert proc.returncode == 1 and f["message"] == f"Transfer thread failed because of {text}. Prefill instance with bootstrap_port=8998 is dead."
