"""DeepSeek V4 Mooncake pairs on SGLang 0.5.12 .. 0.5.13.post1, whose V4 pool registers one
``swa`` state component (SWA KV, then the compress-state rings, then the indexer rings).

The conformance test drives each installed legacy release's own code on CPU in its own
process (``tests/mooncake_dsv4_legacy_worker.py``: the release's
``DeepSeekV4TokenToKVPool`` + ``setup_state_kv_args``, then its ``maybe_send_extra`` on a
stand-in manager) and requires kvcheck's geometry for that release (KV item lengths, state
types and state item lengths), its restated state writes and its verdict to be the
runtime's. The pipeline tests write srt-slurm recipes and launch scripts in the published
shapes: twins pass, a decode that alone speculates fails with the silent corruption, on
both input paths; a release before 0.5.12 has no V4 model and is unchecked.
"""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
import yaml

from helpers import REPO, run_cli
from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.geometry import derive_geometry
from kvcheck.sglang.model import parse_model_config
from kvcheck.sglang.mooncake import common as mb
from kvcheck.sglang.mooncake import states as ms
from kvcheck.sides import Side

RELEASES = REPO / ".venv" / "sglang-releases"
# A DeepSeek V4 shape kept small: five layers (C128, C4, C128, C4, then the NextN layer
# with ratio 0), V4's head dims.
CONFIG = {
    "architectures": ["DeepseekV4ForCausalLM"],
    "model_type": "deepseek_v4",
    "num_hidden_layers": 5,
    "num_attention_heads": 64,
    "num_key_value_heads": 1,
    "head_dim": 512,
    "qk_rope_head_dim": 64,
    "index_head_dim": 128,
    "sliding_window": 128,
    "compress_ratios": [128, 4, 128, 4, 0],
    "num_nextn_predict_layers": 1,
    "hidden_size": 512,
}
SPEC = {
    "speculative_algorithm": "EAGLE",
    "speculative_num_steps": 3,
    "speculative_eagle_topk": 1,
    "speculative_num_draft_tokens": 4,
}
ONLINE = {"SGLANG_OPT_USE_ONLINE_COMPRESS": "1"}
# (prefill flags, decode flags, env of both sides or (prefill env, decode env), releases it applies to)
CASES = [
    ({}, {}, {}, None),
    (SPEC, SPEC, {}, None),
    ({}, SPEC, {}, None),
    (SPEC, {}, {}, None),
    ({}, {}, ONLINE, None),
    ({}, {}, (ONLINE, {}), None),
    ({"enable_deepseek_v4_fp4_indexer": True}, {}, {}, "0.5.13"),
]


def _envs(env) -> tuple[dict, dict]:
    return env if isinstance(env, tuple) else (env, env)


def _side(role: str, flags: dict, env: dict, release: str) -> Side:
    args = ServerArgs(disaggregation_mode=role, disaggregation_transfer_backend="mooncake", tp_size=4, **flags)
    return Side(
        role=role,
        args=args,
        raw_args=dict(flags),
        model=parse_model_config(CONFIG),
        origin=f"{role}.yaml",
        gpu="h200",
        gpu_source="--gpu",
        env=dict(env),
        sglang_version=release,
    )


def _worker_side(flags: dict, env: dict) -> dict:
    return {
        "speculative": "speculative_algorithm" in flags,
        "fp4_indexer": bool(flags.get("enable_deepseek_v4_fp4_indexer")),
        "online_c128": env.get("SGLANG_OPT_USE_ONLINE_COMPRESS") == "1",
    }


def _misplaced(writes: list, decode_items: list[int]) -> bool:
    """A runtime write that does not fill exactly the decode's state page DST_PAGE of its buffer."""
    for _, d, n in writes:
        j, off = divmod(d - ms.DST_STATE_BASE, mb.STRIDE)
        if off != mb.DST_PAGE * decode_items[j] or n != decode_items[j]:
            return True
    return False


@pytest.mark.runtime
@pytest.mark.parametrize("release", ["0.5.12.post1", "0.5.13"])
def test_legacy_dsv4_states_conform_to_the_release(tmp_path, release):
    if not (RELEASES / release / "sglang").is_dir():
        pytest.skip(f"SGLang {release} is not unpacked under {RELEASES}")
    cases = [c for c in CASES if c[3] in (None, release)]
    spec = [
        {"config": CONFIG, "prefill": _worker_side(p, _envs(env)[0]), "decode": _worker_side(d, _envs(env)[1])}
        for p, d, env, _ in cases
    ]
    path = tmp_path / "cases.json"
    path.write_text(json.dumps(spec))
    env = {
        **os.environ,
        "PYTHONPATH": os.pathsep.join(
            [str(RELEASES / release), str(RELEASES / "_deps"), str(REPO), str(REPO / "tests" / "stubs")]
        ),
    }
    proc = subprocess.run(
        [sys.executable, str(REPO / "tests" / "mooncake_dsv4_legacy_worker.py"), str(path)],
        capture_output=True,
        text=True,
        env=env,
        timeout=600,
    )
    assert proc.returncode == 0, proc.stderr[-3000:]
    out = json.loads(proc.stdout.strip().splitlines()[-1])
    assert out["imported"] == release
    corrupt = 0
    for (pf, df, e, _), got in zip(cases, out["cases"], strict=True):
        pe, de = _envs(e)
        pg, dg = derive_geometry(_side("prefill", pf, pe, release)), derive_geometry(_side("decode", df, de, release))
        for geo, rt in ((pg, got["prefill"]), (dg, got["decode"])):
            assert geo.pool == "DSV4", geo.not_modeled_reason
            assert geo.item_lens == rt["kv"], (pf, df)
            assert geo.state_types == rt["types"]
            assert [[r.item_len for r in geo.state_regions]] == rt["state_items"], (pf, df, e)
        assert got["send"]["error"] is None and got["send"]["rc"] == 0
        assert ms.simulate_state_writes(pg, dg) == [tuple(w) for w in got["send"]["writes"]]
        err, why = ms.decide_states(pg, dg, release=release)
        assert why is None
        runtime_corrupts = _misplaced(got["send"]["writes"], got["decode"]["state_items"][0])
        assert (err is not None and err.type == "SilentCorruption") == runtime_corrupts, (pf, df, e)
        corrupt += runtime_corrupts
        if runtime_corrupts:
            # the finding names the inputs that differ, and only those
            spec_differs = ("speculative_algorithm" in pf) != ("speculative_algorithm" in df)
            assert ("--speculative-algorithm" in err.message) == spec_differs, err.message
            assert ("SGLANG_OPT_USE_ONLINE_COMPRESS" in err.message) == (pe != de), err.message
    assert corrupt == 3  # a speculative algorithm on one side only (either side); online C128 on one side only


def _recipe(
    tmp: Path,
    decode_spec: bool,
    tag: str = "v0.5.13-cu130",
    algo_key: str = "speculative-algorithm",
    prefill_env: dict | None = None,
) -> Path:
    """An srt-slurm recipe in the published shape: a DeepSeek V4 Pro 1P1D (DEP4 -> DEP8),
    Mooncake left to SGLang's default, MTP on the decode only when asked (its algorithm under
    ``algo_key``: NVIDIA's GB300 recipes write the abbreviation ``speculative-algo``)."""
    decode = {
        "served-model-name": "deepseek-ai/DeepSeek-V4-Pro",
        "model-path": "/model/",
        "trust-remote-code": True,
        "disaggregation-mode": "decode",
        "tensor-parallel-size": 8,
        "data-parallel-size": 8,
        "enable-dp-attention": True,
    }
    if decode_spec:
        decode.update(
            {
                algo_key: "EAGLE",
                "speculative-num-steps": 3,
                "speculative-eagle-topk": 1,
                "speculative-num-draft-tokens": 4,
            }
        )
    recipe = {
        "name": "dsv4-1p1d",
        "model": {"path": "dsv4-pro", "container": f"lmsysorg/sglang:{tag}", "precision": "fp4"},
        "resources": {
            "gpu_type": "gb300",
            "gpus_per_node": 4,
            "prefill_nodes": 1,
            "prefill_workers": 1,
            "decode_nodes": 2,
            "decode_workers": 1,
        },
        "backend": {
            "type": "sglang",
            "sglang_config": {
                "prefill": {
                    "served-model-name": "deepseek-ai/DeepSeek-V4-Pro",
                    "model-path": "/model/",
                    "trust-remote-code": True,
                    "disaggregation-mode": "prefill",
                    "tensor-parallel-size": 4,
                    "data-parallel-size": 4,
                    "enable-dp-attention": True,
                },
                "decode": decode,
            },
        },
    }
    if prefill_env:
        recipe["backend"]["prefill_environment"] = dict(prefill_env)
    path = tmp / "recipe.yaml"
    path.write_text(yaml.safe_dump(recipe, sort_keys=False))
    return path


def _ids(report: dict) -> list[str]:
    return [f["id"] for pair in report.get("pairs") or [] for f in pair["findings"]] + [
        f["id"] for f in report.get("findings", [])
    ]


@pytest.mark.parametrize("decode_spec", [False, True])
def test_legacy_dsv4_recipe_is_decided(tmp_path, decode_spec):
    proc = run_cli("preflight", "-f", str(_recipe(tmp_path, decode_spec)), "--format", "json")
    report = json.loads(proc.stdout)
    assert "mooncake-unchecked" not in _ids(report), report
    if decode_spec:
        assert proc.returncode == 1 and "mooncake-silent-corruption" in _ids(report)
        msg = next(
            f["message"] for p in report["pairs"] for f in p["findings"] if f["id"] == "mooncake-silent-corruption"
        )
        assert "prefill no --speculative-algorithm, decode --speculative-algorithm EAGLE" in msg and "wrong offsets" in msg
        assert "SGLANG_OPT_USE_ONLINE_COMPRESS" not in msg
    else:
        assert proc.returncode == 0, _ids(report)


@pytest.mark.runtime
def test_abbreviated_speculative_flag_is_the_runtimes_and_fails_the_same(tmp_path):
    """srt-slurm passes each sglang_config key as ``--key value`` (``_config_to_cli_args``),
    so ``speculative-algo: EAGLE`` reaches SGLang as ``--speculative-algo EAGLE``; argparse
    takes the unique prefix, and SGLang 0.5.23's own parser (``ServerArgs.add_cli_args``)
    reads it as ``speculative_algorithm``. The recipe is then the decode-only-MTP pair above:
    the same fail."""
    pytest.importorskip("sglang")
    import argparse

    from sglang.srt.server_args import ServerArgs as SGLangServerArgs

    parser = argparse.ArgumentParser()
    SGLangServerArgs.add_cli_args(parser)
    ns = parser.parse_args(["--model-path", "m", "--speculative-algo", "EAGLE"])
    assert ns.speculative_algorithm == "EAGLE"
    proc = run_cli(
        "preflight", "-f", str(_recipe(tmp_path, True, algo_key="speculative-algo")), "--format", "json"
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and "mooncake-silent-corruption" in _ids(report), _ids(report)


def test_legacy_dsv4_pair_path_gives_the_same_answer(tmp_path):
    m = "deepseek-ai/DeepSeek-V4-Pro"
    (tmp_path / "p.sh").write_text(
        f"python3 -m sglang.launch_server --model-path {m} --disaggregation-mode prefill --tp 4 --dp 4 "
        "--enable-dp-attention\n"
    )
    (tmp_path / "d.sh").write_text(
        f"python3 -m sglang.launch_server --model-path {m} --disaggregation-mode decode --tp 8 --dp 8 "
        "--enable-dp-attention --speculative-algorithm EAGLE --speculative-num-steps 3 "
        "--speculative-eagle-topk 1 --speculative-num-draft-tokens 4\n"
    )
    proc = run_cli(
        "preflight",
        "--prefill",
        str(tmp_path / "p.sh"),
        "--decode",
        str(tmp_path / "d.sh"),
        "--format",
        "json",
        "--sglang-version",
        "0.5.13",
        "--gpu",
        "gb300",
    )
    report = json.loads(proc.stdout)
    assert proc.returncode == 1 and "mooncake-silent-corruption" in _ids(report), _ids(report)


def test_dsv4_before_its_first_release_is_unchecked():
    g = derive_geometry(_side("prefill", {}, {}, "0.5.11"))
    assert g.pool == "not_modeled" and "has no DeepSeek V4 model" in g.not_modeled_reason


def test_online_compression_on_the_prefill_only_is_named_as_the_cause(tmp_path):
    """SGLANG_OPT_USE_ONLINE_COMPRESS=1 on the prefill alone (neither side speculates):
    0.5.13's ``get_compress_state_ring_size`` gives its C128 states one row of 3 x head_dim
    fp32 (6144 bytes) against the decode's 128 rows of 2 x head_dim (524288): the finding
    and its fix name that variable, not the speculative flags."""
    path = _recipe(tmp_path, False, prefill_env=ONLINE)
    proc = run_cli("preflight", "-f", str(path), "--format", "json")
    report = json.loads(proc.stdout)
    assert proc.returncode == 1, _ids(report)
    (f,) = [f for p in report["pairs"] for f in p["findings"] if f["id"] == "mooncake-silent-corruption"]
    assert "item length 6144" in f["message"] and "is 524288" in f["message"]
    assert "prefill SGLANG_OPT_USE_ONLINE_COMPRESS=1, decode SGLANG_OPT_USE_ONLINE_COMPRESS unset" in f["message"]
    assert "speculative" not in f["message"] and "speculative" not in f["fix"]
    assert f["fix"].startswith("Set SGLANG_OPT_USE_ONLINE_COMPRESS the same on both servers")
