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


# ---------------------------------------------------------------------------------------
# release by release: each release's own resolution and its architecture gate
# ---------------------------------------------------------------------------------------

import ast  # noqa: E402
import functools  # noqa: E402
import os  # noqa: E402
import sys  # noqa: E402
from pathlib import Path  # noqa: E402


ROOT = Path(os.environ.get("KVCHECK_SGLANG_RELEASES_DIR") or (Path(sys.prefix) / "sglang-releases"))
INSTALLED = sorted(p.name for p in ROOT.glob("0.*") if (p / "sglang" / "__init__.py").exists())


def _v3_dsa_config(tmp_path) -> Path:
    """DeepSeek V3.2's config under the DeepseekV3ForCausalLM architecture, which every
    release's gate lets through (0.5.3 on), so the release's dtype mapping alone decides."""
    cfg = json.loads((model_dir("deepseek-v3.2") / "config.json").read_text())
    cfg["architectures"] = ["DeepseekV3ForCausalLM"]
    d = tmp_path / "dsv3-dsa"
    d.mkdir(exist_ok=True)
    (d / "config.json").write_text(json.dumps(cfg))
    return d


@functools.lru_cache(maxsize=None)
def _functions(path: str) -> dict:
    """Top-level and method ``FunctionDef`` nodes of a source file, by name (parsed once)."""
    if not Path(path).exists():
        return {}
    return {n.name: n for n in ast.walk(ast.parse(Path(path).read_text())) if isinstance(n, ast.FunctionDef)}


def _function_node(path: str, name: str):
    import copy

    node = _functions(path).get(name)
    if node is None:
        return None
    node = copy.copy(node)
    node.decorator_list = []
    return node


def _release_function(root: Path, rel: str, name: str, **globals_):
    """Function ``name`` of the release's source file ``rel``, compiled from that source
    (decorators dropped) with the names it reads supplied: the release's own statements
    run, without importing the release (one process holds one SGLang)."""
    import builtins
    import logging

    node = _function_node(str(root / rel), name)
    if node is None:
        return None
    stubs = globals_.pop("modules", {})

    def fake_import(mod_name, *a, **k):
        return stubs[mod_name] if mod_name in stubs else builtins.__import__(mod_name, *a, **k)

    g = {"__builtins__": {**builtins.__dict__, "__import__": fake_import}, "logger": logging.getLogger("release"), "Any": object, **globals_}
    exec(compile(ast.Module(body=[node], type_ignores=[]), str(root / rel), "exec"), g)  # noqa: S102 - the release's own function
    return g[name]


def _release_dtype(root: Path, hf, flag: str, cap: tuple[int, int]) -> str | None:
    """``server_args.kv_cache_dtype`` after the release's own DSA dtype default, for a
    model its gate lets through; None when the release has no such function (before 0.5.10)."""
    torch_stub = SimpleNamespace(cuda=SimpleNamespace(get_device_capability=lambda *a, **k: cap))
    modules = {"torch": torch_stub, "sglang.srt.configs.model_config": SimpleNamespace(is_deepseek_dsa=lambda c: True)}
    platform = SimpleNamespace(is_npu=False, is_xpu=False)
    fn = _release_function(root, "sglang/srt/arg_groups/overrides.py", "_dsa_kv_cache_dtype_default", modules=modules,
                           model_config_of=lambda view: SimpleNamespace(hf_config=hf), get_platform=lambda: platform,
                           is_npu=lambda: False, is_xpu=lambda: False, _DEEPSEEK_FAMILY_ARCHS={hf.architectures[0]})
    if fn is not None:
        view = SimpleNamespace(kv_cache_dtype=flag, dsa_prefill_backend=None, dsa_decode_backend=None, device="cuda",
                               get_model_config=lambda: SimpleNamespace(hf_config=hf))
        return fn(view).get("kv_cache_dtype", flag)
    for name in ("_set_default_dsa_kv_cache_dtype", "_set_default_nsa_kv_cache_dtype"):
        fn = _release_function(root, "sglang/srt/server_args.py", name, modules=modules)
        if fn is not None:
            me = SimpleNamespace(kv_cache_dtype=flag, nsa_prefill_backend=None, nsa_decode_backend=None, dsa_prefill_backend=None, dsa_decode_backend=None)
            import inspect

            fn(*[me, cap[0], None][: len(inspect.signature(fn).parameters)])
            return me.kv_cache_dtype
    return None


@pytest.fixture(scope="module")
def v3_dsa_sides(tmp_path_factory):
    """One prefill side per (flag, GPU) on the gate-free DSA config, read once."""
    import yaml

    tmp = tmp_path_factory.mktemp("dsa")
    model = _v3_dsa_config(tmp)
    out = {}
    for cap, gpu in (((9, 0), "h100"), ((10, 0), "b200"), ((12, 0), "sm120")):
        for flag in ("auto", "bf16", "bfloat16", "fp8_e4m3"):
            path = tmp / f"{flag}-{gpu}.yaml"
            path.write_text(yaml.safe_dump({"model-path": str(model), "disaggregation-mode": "prefill", "kv-cache-dtype": flag, "tp-size": 8, "page-size": 64}))
            out[(flag, cap)] = load_side(str(path), "prefill", gpu=gpu, sglang_version="0.5.23")
    return SimpleNamespace(**json.loads((model / "config.json").read_text())), out


@pytest.mark.parametrize("release", INSTALLED)
def test_dsa_kv_dtype_is_each_releases(v3_dsa_sides, release):
    """Each installed release's own dtype default (0.5.9 on, where it is a function of its
    own) against kvcheck's, on every flag and GPU kind."""
    from kvcheck.sglang.resolved import server_args_dtype

    hf, sides = v3_dsa_sides
    for (flag, cap), side in sides.items():
        runtime = _release_dtype(ROOT / release, hf, flag, cap)
        if runtime is None:
            pytest.skip(f"SGLang {release} rewrites the dtype inline in ServerArgs (its gate is checked below)")
        assert server_args_dtype(side, release=release)[0] == runtime, (release, flag, cap)


def _gate(root: Path) -> set[str] | None:
    """The architectures whose DSA KV dtype the release rewrites, read from its source:
    ``_DEEPSEEK_FAMILY_ARCHS`` (0.5.15 on) or the ``model_arch in [...]`` block around the
    rewrite in ``server_args.py``; None when the rewrite has no architecture gate."""
    ov = root / "sglang" / "srt" / "arg_groups" / "overrides.py"
    if ov.exists() and "_dsa_kv_cache_dtype_default" in ov.read_text():
        for n in ast.walk(ast.parse(ov.read_text())):
            if isinstance(n, ast.Assign) and any(getattr(t, "id", "") == "_DEEPSEEK_FAMILY_ARCHS" for t in n.targets):
                return set(ast.literal_eval(n.value.args[0]))
    src = (root / "sglang" / "srt" / "server_args.py").read_text()
    best = None
    for n in ast.walk(ast.parse(src)):
        if isinstance(n, ast.If) and isinstance(n.test, ast.Compare) and getattr(n.test.left, "id", "") == "model_arch" \
                and isinstance(n.test.comparators[0], (ast.List, ast.Tuple)):
            seg = ast.get_source_segment(src, n)
            if ("is_deepseek_nsa(" in seg or "is_deepseek_dsa(" in seg) and ("KV cache dtype to" in seg or "_kv_cache_dtype(major" in seg):
                if best is None or len(seg) < best[0]:
                    best = (len(seg), {e.value for e in n.test.comparators[0].elts})
    return best[1] if best else None


@pytest.mark.parametrize("release", INSTALLED)
def test_dsa_rewrite_gate_is_each_releases(release):
    from kvcheck.sglang import resolved

    gate = _gate(ROOT / release)
    for arch in resolved.DSA_REWRITE_ARCHS:
        side = SimpleNamespace(model=SimpleNamespace(dsa=True, architecture=arch), sglang_version=release, version_source="")
        want = (arch in resolved._NSA_ARCHS) if gate is None else (arch in gate)
        assert resolved.dsa_rewrites(side, release) == want, (release, arch)


def test_unknown_gpu_without_the_dtype_check_decides_both_item_sizes(tmp_path):
    """Before 0.5.10 the decode compares no dtype: bf16 against unset on an unknown GPU
    moves 2-byte KV into 1-byte KV from SM100 on, so it is not passed on the assumed Hopper.
    (A DeepseekV3ForCausalLM DSA checkpoint: 0.5.8's gate leaves DeepseekV32ForCausalLM out.)"""
    import yaml

    model = _v3_dsa_config(tmp_path)

    def side(role, flag):
        path = tmp_path / f"old-{role}-{flag}.yaml"
        path.write_text(yaml.safe_dump({"model-path": str(model), "disaggregation-mode": role, "disaggregation-transfer-backend": "nixl",
                                        "tp-size": 8, "page-size": 64, **({"kv-cache-dtype": flag} if flag else {})}))
        return load_side(str(path), role, sglang_version="0.5.8")

    report = run_preflight(side("prefill", "bf16"), side("decode", None), kernel="builtin")
    f = [x for x in report.findings if x.id == "kv-dtype-gpu"]
    assert f and "bfloat16, 2 bytes per element, the decode's fp8_e4m3, 1 bytes per element: the item lengths differ" in f[0].message
    assert report.verdict in ("unchecked", "fail")
