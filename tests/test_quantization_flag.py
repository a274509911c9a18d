"""An explicit ``--quantization modelopt_fp4`` on a ModelOpt FP4 export is the checkpoint's own
method (``kvcheck.sglang.startup.unrestated.modelopt_fp4_on_its_export``), decided like an
unset flag; on any other checkpoint the side stays ``startup-unchecked``.

The compatibility table is read from each unpacked release's own ``configs/model_config.py``;
SGLang 0.5.23's ``ModelConfig`` (``_verify_quantization``) runs on the Hub layout of an
hf_quant_config.json export."""

from __future__ import annotations

import ast
import json
from pathlib import Path

import pytest

from helpers import REPO, report_findings, run_cli
from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.model import parse_model_config
from kvcheck.sglang.startup.unrestated import modelopt_fp4_on_its_export, unrestated_flag
from kvcheck.sides import Side
from kvcheck.sources.models import load_catalog

RELEASES = REPO / ".venv" / "sglang-releases"
HF_QUANT_EXPORT = "nvidia/Qwen3-235B-A22B-NVFP4"  # quantization only in hf_quant_config.json
EMBEDDED_EXPORT = "nvidia/Qwen3.5-397B-A17B-NVFP4"  # quantization_config in config.json
FP8_CHECKPOINT = "deepseek-ai/DeepSeek-R1"


def _compat(model_config_py: Path) -> dict[str, list[str]]:
    """``compatible_quantization_methods`` as the release's ``_verify_quantization`` spells it."""
    for node in ast.walk(ast.parse(model_config_py.read_text())):
        if isinstance(node, ast.Assign) and any(
            isinstance(t, ast.Name) and t.id == "compatible_quantization_methods" for t in node.targets
        ):
            return ast.literal_eval(node.value)
    raise AssertionError(f"no compatible_quantization_methods in {model_config_py}")


def _side(hub_id: str, quant: str | None) -> Side:
    flags = {"disaggregation_mode": "prefill"} | ({"quantization": quant} if quant else {})
    return Side(role="prefill", args=ServerArgs(**flags), raw_args=dict(flags),
                model=parse_model_config(load_catalog()[hub_id]["config"], source=hub_id), sglang_version="0.5.23",
                gpu="b200")


def test_each_release_lists_modelopt_for_modelopt_fp4():
    """Every unpacked release accepts a ``modelopt`` checkpoint under ``modelopt_fp4``; an
    ``fp8`` one only from 0.5.18, so an FP8 checkpoint keeps the side unchecked."""
    found = sorted(p for p in RELEASES.glob("*/sglang/srt/configs/model_config.py"))
    if not found:
        pytest.skip(f"no SGLang release unpacked under {RELEASES}")
    for path in found:
        release = path.parts[-5]
        table = _compat(path)
        assert "modelopt" in table["modelopt_fp4"], release
        newer = tuple(int(x) for x in release.split(".")[:3] if x.isdigit()) >= (0, 5, 18)
        assert ("fp8" in table["modelopt_fp4"]) == newer, release
    assert modelopt_fp4_on_its_export("modelopt_fp4", _side(HF_QUANT_EXPORT, None).model)
    assert modelopt_fp4_on_its_export("MODELOPT_FP4", _side(EMBEDDED_EXPORT, None).model)
    assert not modelopt_fp4_on_its_export("modelopt_fp4", _side(FP8_CHECKPOINT, None).model)
    assert not modelopt_fp4_on_its_export("modelopt_fp8", _side(HF_QUANT_EXPORT, None).model)


@pytest.mark.runtime
def test_sglang_accepts_the_flag_on_the_export_and_kvcheck_goes_on(tmp_path):
    pytest.importorskip("sglang")
    from sglang.srt.configs.model_config import ModelConfig

    raw = dict(load_catalog()[HF_QUANT_EXPORT]["config"])
    quant = dict(raw.pop("quantization_config"))
    quant.pop("quant_method")
    (tmp_path / "config.json").write_text(json.dumps(raw))
    (tmp_path / "hf_quant_config.json").write_text(json.dumps({"producer": {"name": "modelopt"}, "quantization": quant}))
    mc = ModelConfig(str(tmp_path), trust_remote_code=False, quantization="modelopt_fp4")
    assert mc.quantization == "modelopt_fp4"
    assert unrestated_flag(_side(HF_QUANT_EXPORT, "modelopt_fp4")) is None
    stop = unrestated_flag(_side(FP8_CHECKPOINT, "modelopt_fp4"))
    assert stop is not None and "--quantization modelopt_fp4 on a checkpoint quantized with fp8" in stop.reason


@pytest.mark.parametrize("hub_id, exit_code", [(HF_QUANT_EXPORT, 0), (FP8_CHECKPOINT, 4)])
def test_pair_with_the_flag(tmp_path, hub_id, exit_code):
    for role in ("prefill", "decode"):
        (tmp_path / f"{role}.sh").write_text(
            f"python3 -m sglang.launch_server --model-path {hub_id} --disaggregation-mode {role} --tp 8 "
            "--quantization modelopt_fp4\n"
        )
    proc = run_cli("preflight", "--prefill", str(tmp_path / "prefill.sh"), "--decode", str(tmp_path / "decode.sh"),
                   "--sglang-version", "0.5.23", "--gpu", "b200", "--format", "json")
    report = json.loads(proc.stdout)
    ids = [f["id"] for f in report_findings(report)]
    assert proc.returncode == exit_code, ids
    assert ("startup-unchecked" in ids) == (exit_code == 4)


def _fp_recipe(tmp: Path, alias: str) -> Path:
    """An srt-slurm recipe in the published shape: ``model.path`` a site alias, both roles
    serving ``deepseek-ai/DeepSeek-R1`` (as NVIDIA's FP4 recipes do with ``dsr1-fp4``)."""
    import yaml

    role = {"served-model-name": FP8_CHECKPOINT, "model-path": "/model/", "tensor-parallel-size": 8}
    recipe = {
        "name": "r1-1p1d",
        "model": {"path": alias, "container": "lmsysorg/sglang:v0.5.23-cu130", "precision": "fp4"},
        "resources": {"gpu_type": "b200", "gpus_per_node": 8, "prefill_nodes": 1, "prefill_workers": 1,
                      "decode_nodes": 1, "decode_workers": 1},
        "backend": {"type": "sglang", "sglang_config": {"prefill": {**role, "disaggregation-mode": "prefill"},
                                                        "decode": {**role, "disaggregation-mode": "decode"}}},
    }
    path = tmp / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def test_a_served_name_is_not_the_checkpoint_of_a_re_upload_of_another_precision(tmp_path):
    """The catalog's DeepSeek-R1 is the FP8 checkpoint (its config: quant_method fp8), so a
    recipe whose own model is ``dsr1-fp4`` serves another checkpoint under that name: the
    served name is not used and the model is unknown (unchecked, saying why). An alias that
    agrees (``dsr1-fp8``) resolves as before."""
    from kvcheck.sources.models.clues import precision_conflict

    assert load_catalog()[FP8_CHECKPOINT]["config"]["quantization_config"]["quant_method"] == "fp8"
    assert precision_conflict("dsr1-fp4", FP8_CHECKPOINT) == "fp4"
    assert precision_conflict("dsfp8", FP8_CHECKPOINT) is None
    assert precision_conflict("qwen3.5-nvfp4", EMBEDDED_EXPORT) is None
    assert precision_conflict("dsv4-pro", "deepseek-ai/DeepSeek-V4-Pro") is None
    # DeepSeek V4 ships FP4 experts under an fp8 quant config (its config: expert_dtype fp4)
    assert load_catalog()["deepseek-ai/DeepSeek-V4-Pro"]["config"]["expert_dtype"] == "fp4"
    assert precision_conflict("deepseekv4-fp4", "deepseek-ai/DeepSeek-V4-Pro") is None
    proc = run_cli("preflight", "-f", str(_fp_recipe(tmp_path, "dsr1-fp4")), "--format", "json")
    report = json.loads(proc.stdout)
    msgs = [f["message"] for p in report.get("pairs") or [] for f in p["findings"] if f["id"] == "unknown-model"]
    assert proc.returncode == 4 and msgs and "not used: the file's model dsr1-fp4 says fp4" in msgs[0], report
    proc = run_cli("preflight", "-f", str(_fp_recipe(tmp_path, "dsr1-fp8")), "--format", "json")
    report = json.loads(proc.stdout)
    assert not [f for p in report.get("pairs") or [] for f in p["findings"] if f["id"] == "unknown-model"], report


def test_a_re_upload_named_unquantized_or_w4afp8_is_not_a_quantized_served_name(tmp_path):
    """``dsr1-bf16`` (a BF16 re-upload) or ``dsr1-w4afp8`` (int4 experts, fp8 activations)
    served as ``deepseek-ai/DeepSeek-R1`` is not the FP8 checkpoint either: ``w4afp8`` holds
    ``fp8`` and ``bf16`` no quantized word, so both were taken as the entry and decided on its
    quant config. The same holds for a ModelOpt export whose KV cache is FP8
    (kv_cache_quant_algo) served under a re-upload named bf16. An unquantized entry under a
    bf16 name is the entry."""
    from kvcheck.sources.models.clues import precision_conflict

    assert precision_conflict("dsr1-bf16", FP8_CHECKPOINT) == "bf16"
    assert precision_conflict("dsr1-w4afp8", FP8_CHECKPOINT) == "w4afp8"
    assert precision_conflict("/models/llama-3.1-70b-bf16", "nvidia/Llama-3.1-70B-Instruct-FP8") == "bf16"
    assert precision_conflict("qwen3-8b-bf16", "Qwen/Qwen3-8B") is None
    assert precision_conflict("dsfp8", FP8_CHECKPOINT) is None
    proc = run_cli("preflight", "-f", str(_fp_recipe(tmp_path, "dsr1-bf16")), "--format", "json")
    report = json.loads(proc.stdout)
    msgs = [f["message"] for p in report.get("pairs") or [] for f in p["findings"] if f["id"] == "unknown-model"]
    assert proc.returncode == 4 and msgs and "not used: the file's model dsr1-bf16 says bf16" in msgs[0], report
