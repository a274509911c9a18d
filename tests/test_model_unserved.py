"""Hybrid architectures SGLang 0.5.23 does not serve (Jamba, MiniMax-Text-01/M1, MiniMax):
kvcheck keeps them ``not_modeled`` (verdict unchecked, exit 4) and says why, and the why
is held to the runtime: no class under ``sglang/srt/models`` defines them, no hybrid pool
config claims them, and ``model_loader.utils.resolve_transformers_arch`` (what the model
load runs for an architecture without a native class) refuses Jamba and MiniMax-Text-01
with the transformers release SGLang 0.5.23 pins.
"""

from __future__ import annotations

import re
import types
from pathlib import Path

import pytest

from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.model import NOT_MODELED_ARCHITECTURES, parse_model_config
from kvcheck.sides import Side

UNSERVED = ("JambaForCausalLM", "MiniMaxText01ForCausalLM", "MiniMaxM1ForCausalLM", "MiniMaxForCausalLM")

# Shapes of the public configs (ai21labs/Jamba-v0.1, MiniMaxAI/MiniMax-Text-01), fewer layers.
JAMBA = {"architectures": ["JambaForCausalLM"], "model_type": "jamba", "num_hidden_layers": 8, "num_attention_heads": 32,
         "num_key_value_heads": 8, "hidden_size": 4096, "attn_layer_offset": 4, "attn_layer_period": 8, "mamba_d_state": 16,
         "mamba_d_conv": 4, "mamba_expand": 2, "vocab_size": 65536, "torch_dtype": "bfloat16"}
MINIMAX_TEXT_01 = {"architectures": ["MiniMaxText01ForCausalLM"], "model_type": "minimax_text_01", "num_hidden_layers": 8,
                   "num_attention_heads": 64, "num_key_value_heads": 8, "head_dim": 128, "hidden_size": 6144,
                   "attn_type_list": [0, 0, 0, 0, 0, 0, 0, 1], "vocab_size": 200064, "torch_dtype": "bfloat16",
                   "auto_map": {"AutoConfig": "configuration_minimax_text_01.MiniMaxText01Config",
                                "AutoModelForCausalLM": "modeling_minimax_text_01.MiniMaxText01ForCausalLM"}}


@pytest.mark.parametrize("cfg", [JAMBA, MINIMAX_TEXT_01], ids=["jamba", "minimax-text-01"])
def test_unserved_hybrid_is_unchecked_with_its_reason(cfg):
    from kvcheck.preflight import run_preflight

    model = parse_model_config(cfg)
    assert model.attention == "not_modeled" and "SGLang 0.5.23 does not serve" in model.not_modeled_reason
    sides = [Side(role=r, args=ServerArgs(disaggregation_mode=r, disaggregation_transfer_backend="nixl"), raw_args={},
                  model=model, origin=r) for r in ("prefill", "decode")]
    report = run_preflight(*sides)
    assert report.verdict == "unchecked" and report.plan is None
    assert any(f.id == "not-modeled" and "does not serve" in f.message for f in report.findings)


@pytest.mark.runtime
def test_no_native_class_and_no_hybrid_pool_config():
    sglang = pytest.importorskip("sglang")
    models = Path(sglang.__file__).parent / "srt" / "models"
    defined = set()
    for f in models.glob("*.py"):
        defined |= set(re.findall(r"^class (\w+)\(", f.read_text(errors="replace"), re.M))
    assert not set(UNSERVED) & defined
    assert "MiniMaxM3SparseForCausalLM" in defined  # the scan sees the classes SGLang does define
    hybrid_arch = (Path(sglang.__file__).parent / "srt" / "configs" / "hybrid_arch.py").read_text()
    assert "Jamba" not in hybrid_arch and "MiniMaxText01" not in hybrid_arch
    assert set(UNSERVED) <= set(NOT_MODELED_ARCHITECTURES)


def _model_config(cfg: dict):
    from sglang.srt.configs.model_config import ModelImpl

    hf = types.SimpleNamespace(auto_map=cfg.get("auto_map"), architectures=cfg["architectures"])
    return types.SimpleNamespace(hf_config=hf, hf_text_config=hf, model_impl=ModelImpl.AUTO, is_generation=True,
                                 is_multimodal=False, model_path="/nonexistent", revision=None)


@pytest.mark.runtime
@pytest.mark.parametrize("cfg,message", [
    (JAMBA, "JambaForCausalLM has no SGlang implementation and the Transformers implementation is not compatible with SGLang."),
    (MINIMAX_TEXT_01, "Cannot find model module. 'MiniMaxText01ForCausalLM' is not a registered model in the Transformers library"),
], ids=["jamba", "minimax-text-01"])
def test_the_model_load_refuses_them(cfg, message):
    """What the scheduler's model load (``get_model_architecture`` -> ``resolve_transformers_arch``)
    does for these architectures with the pinned transformers (5.19.0)."""
    pytest.importorskip("sglang")
    import transformers
    from sglang.srt.model_loader.utils import resolve_transformers_arch

    assert transformers.__version__ == "5.19.0"
    with pytest.raises(ValueError) as exc:
        resolve_transformers_arch(_model_config(cfg), cfg["architectures"])
    assert str(exc.value).startswith(message)
    reason = NOT_MODELED_ARCHITECTURES[cfg["architectures"][0]]
    assert message[:25] in reason
