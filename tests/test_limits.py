"""Limits on everything kvcheck reads (kvcheck.sources.limits): files are refused by
size before reading, YAML alias bombs and deep nesting quickly and in little memory,
nested JSON without a RecursionError, and config.json values outside a plausible range
per field (from released models) or an unknown dtype name, each exit 2 naming the field.
"""

from __future__ import annotations

import json
import subprocess

import pytest
from helpers import MODELS, REPO, model_dir, write_config
from measure import run_measured

from kvcheck.errors import InputError
from kvcheck.sglang.model import _text_config, parse_model_config
from kvcheck.sources.limits import MAX_FILE_BYTES, MODEL_FIELD_RANGES, YamlLimitError, check_model_config, clip_line, load_yaml_limited

DECODE = {"disaggregation-mode": "decode", "disaggregation-transfer-backend": "nixl", "page-size": 16}


def _run(*args: str) -> tuple[subprocess.CompletedProcess, float]:
    """The CLI in a fresh process; (result, its peak RSS in MB)."""
    proc, _, rss = run_measured(*args, timeout=120)
    return proc, rss


BOMB = "\n".join(
    [f'{chr(97 + i)}: &{chr(97 + i)} [' + ",".join([f"*{chr(96 + i)}"] * 9 if i else ['"lol"'] * 9) + "]" for i in range(9)]
) + "\n"


def test_a_yaml_alias_bomb_is_refused_quickly_in_little_memory(tmp_path):
    assert len(BOMB) < 700  # 9^9 = 387 million strings once expanded
    p = tmp_path / "prefill.yaml"
    p.write_text(f"model-path: {model_dir('llama-3.1-8b')}\n" + BOMB)
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc, rss = _run("preflight", "--prefill", str(p), "--decode", str(d))
    assert proc.returncode == 2, proc.stderr
    assert str(p) in proc.stderr and "alias" in proc.stderr
    assert rss < 300 or rss != rss, rss  # MB (nan without /proc); was 2.9 GiB and growing


def test_yaml_limits_in_process():
    with pytest.raises(YamlLimitError, match="alias"):
        load_yaml_limited(BOMB)
    with pytest.raises(YamlLimitError, match="nested deeper"):
        load_yaml_limited("a: " + "[" * 200 + "]" * 200)
    with pytest.raises(YamlLimitError, match="aliases"):
        load_yaml_limited("a: &x 1\nb: [" + ", ".join(["*x"] * 150) + "]")
    assert load_yaml_limited("a: &x [1, 2]\nb: *x\nc: {d: e}") == {"a": [1, 2], "b": [1, 2], "c": {"d": "e"}}
    assert load_yaml_limited("") is None


def test_a_file_past_the_size_limit_is_refused_before_reading(tmp_path):
    big = tmp_path / "prefill.yaml"
    with open(big, "wb") as fh:  # sparse: no disk cost
        fh.truncate(MAX_FILE_BYTES + 1)
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc, _ = _run("preflight", "--prefill", str(big), "--decode", str(d))
    assert proc.returncode == 2, proc.stderr
    assert str(big) in proc.stderr and "bytes" in proc.stderr


def test_deeply_nested_json_args_are_exit_2_not_a_recursion_error(tmp_path):
    p = tmp_path / "p.json"
    p.write_text("[" * 100_000 + "]" * 100_000)
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc, _ = _run("preflight", "--prefill", str(p), "--decode", str(d))
    assert proc.returncode == 2 and str(p) in proc.stderr and "nested" in proc.stderr, proc.stderr
    cfg = tmp_path / "config.json"
    cfg.write_text("[" * 100_000 + "]" * 100_000)
    proc, _ = _run("preflight", "--prefill", str(REPO / "configs/aligned/prefill.yaml"), "--decode", str(d), "--model-config", str(cfg))
    assert proc.returncode == 2 and "nested" in proc.stderr, proc.stderr


def _llama() -> dict:
    return json.loads((model_dir("llama-3.1-8b") / "config.json").read_text())


@pytest.mark.parametrize(
    "field, value",
    [("v_head_dim", -5), ("num_hidden_layers", 1_000_000), ("head_dim", 0), ("num_key_value_heads", 10**9), ("hidden_size", "4096"),
     ("num_attention_heads", True), ("torch_dtype", "float7"), ("torch_dtype", 16), ("kv_lora_rank", -1)],
)
def test_config_json_values_out_of_range_are_exit_2_naming_the_field(tmp_path, field, value):
    raw = _llama()
    raw[field] = value
    cfg = tmp_path / "config.json"
    cfg.write_text(json.dumps(raw))
    with pytest.raises(InputError) as err:
        parse_model_config(raw, source=str(cfg))
    assert err.value.field == field
    d = write_config(tmp_path, "decode", "llama-3.1-8b", DECODE)
    proc, rss = _run("preflight", "--prefill", str(REPO / "configs/aligned/prefill.yaml"), "--decode", str(d), "--model-config", str(cfg))
    assert proc.returncode == 2, proc.stderr
    assert f"'{field}'" in proc.stderr and str(cfg) in proc.stderr


def test_every_bundled_model_config_is_inside_the_ranges():
    for cfg in MODELS.glob("*/config.json"):
        check_model_config(_text_config(json.loads(cfg.read_text())), str(cfg))
    shared = REPO.parent / "shared" / "models"
    for cfg in sorted(shared.glob("*.json")) if shared.is_dir() else []:
        check_model_config(_text_config(json.loads(cfg.read_text())), str(cfg))


def test_ranges_cover_what_released_models_use():
    # Llama 3.1 405B: 126 layers, 128 heads, hidden 16384; DeepSeek V3: kv_lora_rank 512.
    assert MODEL_FIELD_RANGES["num_hidden_layers"][1] >= 126 and MODEL_FIELD_RANGES["num_attention_heads"][1] >= 128
    assert MODEL_FIELD_RANGES["hidden_size"][1] >= 16384 and MODEL_FIELD_RANGES["kv_lora_rank"][1] >= 512


def test_clip_line_cuts_huge_values_and_keeps_ordinary_lines():
    line = "kvcheck: error: x.yaml: model-path '" + "m" * 10_000_000 + "' is not a local directory"
    out = clip_line(line)
    assert len(out) < 400 and out.startswith("kvcheck: error: x.yaml") and "is not a local directory" in out and "chars)" in out
    ordinary = "kvcheck: error: " + "word " * 50
    assert clip_line(ordinary) == ordinary
