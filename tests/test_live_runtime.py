"""Live servers against SGLang 0.5.23's own objects, on 127.0.0.1.

* ``/server_info`` is served by a real HTTP server whose payload is what SGLang's own
  handler builds: ``prepare_server_args`` (SGLang's parser and resolution) on the
  test's flags, then ``build_server_info`` + ``redact_watermark_secrets`` +
  ``msgspec_to_builtins``, as ``sglang.srt.entrypoints.http_server.server_info`` does.
  The flags carry secrets (``--api-key``, ``--admin-api-key``) that must never appear in
  anything kvcheck prints or saves; SGLang's ``launch_command`` echoes them too.
* The prefill's bootstrap server is SGLang's own ``NixlKVBootstrapServer``. The test
  registers prefill ranks the way ``CommonKVManager.register_to_bootstrap`` does
  (``PUT /route``, ranks laid out by ``derive_attention_ranks``); kvcheck only GETs.
"""

from __future__ import annotations

import json
import shutil
import threading
import time
from pathlib import Path

import httpx
import pytest
from helpers import REPO, run_cli, write_config
from live_http import LoopbackServer, Reply, free_port

pytestmark = pytest.mark.runtime

API_KEY = "sk-live-API-KEY-0001"
ADMIN_KEY = "admin-KEY-SECRET-0002"
SECRETS = (API_KEY, ADMIN_KEY)
MODEL = "llama-3.1-8b"
NIXL = {"disaggregation-transfer-backend": "nixl"}


@pytest.fixture(scope="module")
def sglang():
    return pytest.importorskip("sglang")


def server_info_payload(sglang, args: dict) -> dict:
    """SGLang's own /server_info body for a server launched with ``args`` (dash keys)."""
    from sglang.srt.sampling.watermarking.core import redact_watermark_secrets
    from sglang.srt.server_args import prepare_server_args
    from sglang.srt.utils.common import build_server_info
    from sglang.srt.utils.msgspec_utils import msgspec_to_builtins

    argv: list[str] = ["--device", "cuda"]
    for k, v in args.items():
        if v is True:
            argv.append(f"--{k}")
        else:
            argv += [f"--{k}", str(v)]
    sa = prepare_server_args(argv)
    try:
        sa.resolve_once()
    except Exception:  # already resolved by prepare_server_args on some paths
        pass
    body = {
        **build_server_info(sa, {}),
        "startup_time": time.time(),
        "internal_states": [{}],
        "version": sglang.__version__,
        "frontend": "python",
    }
    return msgspec_to_builtins(redact_watermark_secrets(body))


def model_info_payload(info: dict) -> dict:
    cfg = json.loads((Path(info["model_path"]) / "config.json").read_text())
    return {
        "model_path": info["model_path"],
        "served_model_name": info.get("served_model_name"),
        "is_generation": True,
        "disaggregation_mode": info["disaggregation_mode"],
        "model_type": cfg.get("model_type"),
        "architectures": cfg.get("architectures"),
    }


def serve(info: dict, *, token: str | None = API_KEY) -> LoopbackServer:
    return LoopbackServer({"/server_info": Reply(200, info), "/model_info": Reply(200, model_info_payload(info))}, require_token=token)


def start_bootstrap(sglang, port: int):
    from sglang.srt.disaggregation.nixl.conn import NixlKVBootstrapServer

    srv = NixlKVBootstrapServer("127.0.0.1", port)
    for _ in range(100):
        try:
            httpx.get(f"http://127.0.0.1:{port}/health", timeout=1)
            return srv
        except httpx.TransportError:
            time.sleep(0.05)
    raise RuntimeError("bootstrap server did not start")


def register_prefill_ranks(port: int, info: dict, **override) -> int:
    """PUT /route once per prefill rank, with the payload a prefill rank sends."""
    from sglang.srt.runtime_context import derive_attention_ranks, derive_attn_tp_size

    attn_dp, cp, pp = info["attn_dp_size"], info["attn_cp_size"], info["pp_size"]
    attn_tp = derive_attn_tp_size(tp_size=info["tp_size"], attn_cp_size=cp, attn_dp_size=attn_dp)
    n = 0
    for pp_rank in range(pp):
        for tp_rank in range(info["tp_size"]):
            attn_tp_rank, attn_dp_rank = derive_attention_ranks(tp_rank=tp_rank, attn_tp_size=attn_tp, attn_cp_size=cp)
            payload = {
                "attn_tp_size": attn_tp, "attn_tp_rank": attn_tp_rank,
                "attn_cp_size": cp, "attn_cp_rank": (tp_rank // attn_tp) % cp,
                "attn_dp_size": attn_dp, "attn_dp_rank": attn_dp_rank,
                "pp_size": pp, "pp_rank": pp_rank,
                "system_dp_size": info["dp_size"], "system_dp_rank": 0,
                "rank_ip": "127.0.0.1", "rank_port": 41000 + n,
                "page_size": info["page_size"], "kv_cache_dtype": info["kv_cache_dtype"],
                "kv_layout": None, "dsv41_spec_layout": None,
                "load_balance_method": info.get("load_balance_method", "follow_bootstrap_room"),
                "enable_dsa_cache_layer_split": False,
                "enable_kv_cache_sharding": info["enable_kv_cache_sharding"],
                "prefill_http_port": info["port"],
                "decode_allocation_policy": "early",
            }
            payload.update(override)
            r = httpx.put(f"http://127.0.0.1:{port}/route", json=payload, timeout=5)
            assert r.status_code == 200, r.text
            n += 1
    return n


def prefill_args(bootstrap_port: int, **extra) -> dict:
    return {
        "model-path": str(REPO / "configs" / "models" / MODEL),
        "disaggregation-mode": "prefill", **NIXL, "tp-size": 2, "page-size": 16,
        "disaggregation-bootstrap-port": bootstrap_port,
        "api-key": API_KEY, "admin-api-key": ADMIN_KEY, **extra,
    }


def decode_args(**extra) -> dict:
    return {
        "model-path": str(REPO / "configs" / "models" / MODEL),
        "disaggregation-mode": "decode", **NIXL, "tp-size": 2, "page-size": 16,
        "api-key": API_KEY, "admin-api-key": ADMIN_KEY, **extra,
    }


def yaml_of(tmp: Path, name: str, args: dict) -> Path:
    """The equivalent SGLang --config YAML (secrets left out: they do not shape KV)."""
    plain = {k: v for k, v in args.items() if k not in ("model-path", "api-key", "admin-api-key")}
    return write_config(tmp, name, MODEL, plain)


def kv(*args: str, key: str | None = API_KEY, timeout: float = 60):
    import os
    import subprocess
    import sys

    env = {k: v for k, v in os.environ.items() if k != "KVCHECK_API_KEY"}
    if key:
        env["KVCHECK_API_KEY"] = key
    return subprocess.run([sys.executable, "-m", "kvcheck", *args], capture_output=True, text=True, cwd=REPO, timeout=timeout, env=env)


def assert_no_secrets(*texts: str) -> None:
    for t in texts:
        for s in SECRETS:
            assert s not in t, f"secret {s[:6]}... leaked"


def contract_core(report: dict) -> tuple:
    return report["verdict"], report["plan"], sorted((f["id"], f["severity"], (f["runtime_error"] or {}).get("message")) for f in report["findings"])


@pytest.fixture
def bootstrap(sglang):
    port = free_port()
    srv = start_bootstrap(sglang, port)
    yield port, srv
    srv.close()


def test_sglang_payload_really_carries_the_secrets(sglang, bootstrap):
    port, _ = bootstrap
    info = server_info_payload(sglang, prefill_args(port))
    assert info["api_key"] == API_KEY and info["admin_api_key"] == ADMIN_KEY
    assert API_KEY in (info.get("launch_command") or "")
    assert info["page_size"] == 16 and info["version"] == "0.5.23"


def test_route_503_before_ranks_register_then_the_topology(sglang, bootstrap, tmp_path):
    port, srv = bootstrap
    p_info = server_info_payload(sglang, prefill_args(port))
    d_info = server_info_payload(sglang, decode_args())
    with serve(p_info) as p, serve(d_info) as d:
        # before: nothing registered -> 503 until the deadline -> exit 3, said as such
        proc = kv("preflight", "--prefill", p.url, "--decode", d.url, "--format", "json", "--deadline", "1.5")
        assert proc.returncode == 3, proc.stderr
        assert "not fully registered" in proc.stderr and "(0 workers registered)" in proc.stderr
        assert f"127.0.0.1:{port}/route" in proc.stderr
        assert_no_secrets(proc.stdout, proc.stderr)

        # during: ranks register while kvcheck is retrying the 503s
        timer = threading.Timer(1.0, register_prefill_ranks, args=(port, p_info))
        timer.start()
        proc = kv("preflight", "--prefill", p.url, "--decode", d.url, "--format", "json", "--deadline", "15")
        timer.join()
        assert proc.returncode == 0, proc.stderr
        report = json.loads(proc.stdout)
        assert report["verdict"] == "pass", report["findings"]
        assert report["plan"]["segments"] == [[0, 64, "VRAM", "VRAM"]]
        assert_no_secrets(proc.stdout, proc.stderr)
        # the registration table is as the test left it: kvcheck wrote nothing
        assert srv._registered_count == 2 and srv.room_to_dp_rank == {}
        assert {s.method for s in p.seen} == {"GET"} and {s.method for s in d.seen} == {"GET"}


def test_live_pair_gives_the_same_verdict_as_the_equivalent_yaml_files(sglang, bootstrap, tmp_path):
    port, _ = bootstrap
    cases = {
        "aligned": ({}, {}),
        "page-size-mismatch": ({}, {"page-size": 32}),
        "kv-dtype-auto-vs-bf16": ({}, {"kv-cache-dtype": "bf16"}),
    }
    for name, (p_extra, d_extra) in cases.items():
        pa, da = prefill_args(port, **p_extra), decode_args(**d_extra)
        p_info, d_info = server_info_payload(sglang, pa), server_info_payload(sglang, da)
        with serve(p_info) as p, serve(d_info) as d:
            if name == "aligned":
                register_prefill_ranks(port, p_info)
            live = kv("preflight", "--prefill", p.url, "--decode", d.url, "--format", "json")
        files = run_cli("preflight", "--prefill", str(yaml_of(tmp_path, "p-" + name, pa)), "--decode", str(yaml_of(tmp_path, "d-" + name, da)), "--format", "json")
        assert live.returncode == files.returncode, (name, live.stderr, files.stderr)
        assert contract_core(json.loads(live.stdout)) == contract_core(json.loads(files.stdout)), name
        assert_no_secrets(live.stdout, live.stderr)
    assert json.loads(live.stdout)["verdict"] == "fail"


def test_snapshot_is_redacted_and_checks_offline_like_the_live_pair(sglang, bootstrap, tmp_path):
    port, _ = bootstrap
    p_info = server_info_payload(sglang, prefill_args(port))
    d_info = server_info_payload(sglang, decode_args(**{"page-size": 32}))
    register_prefill_ranks(port, p_info)
    ps, ds = tmp_path / "prefill-snap.json", tmp_path / "decode-snap.json"
    with serve(p_info) as p, serve(d_info) as d:
        a = kv("snapshot", p.url, "-o", str(ps))
        b = kv("snapshot", d.url, "-o", str(ds))
        live = kv("preflight", "--prefill", p.url, "--decode", d.url, "--format", "json")
    for proc in (a, b):
        assert proc.returncode == 0, proc.stderr
        assert_no_secrets(proc.stdout, proc.stderr)
    snap = json.loads(ps.read_text())
    assert_no_secrets(ps.read_text(), ds.read_text())
    assert snap["server_info"]["api_key"] == "<redacted>" and snap["server_info"]["admin_api_key"] == "<redacted>"
    assert "--api-key <redacted>" in snap["server_info"]["launch_command"]
    assert snap["role"] == "prefill" and snap["route"]["page_size"] == 16 and snap["route"]["attn_tp_size"] == 2
    assert json.loads(ds.read_text())["route"] is None
    assert (ps.stat().st_mode & 0o777) == 0o600
    # servers gone: the snapshots alone give the same answer
    offline = run_cli("preflight", "--prefill", str(ps), "--decode", str(ds), "--format", "json")
    assert offline.returncode == live.returncode == 1
    assert contract_core(json.loads(offline.stdout)) == contract_core(json.loads(live.stdout))
    assert "page-size-mismatch" in [f["id"] for f in json.loads(offline.stdout)["findings"]]
    assert_no_secrets(offline.stdout, offline.stderr, live.stdout, live.stderr)


def test_bootstrap_disagreeing_with_server_info_is_a_live_route_error(sglang, bootstrap):
    port, _ = bootstrap
    p_info = server_info_payload(sglang, prefill_args(port))
    d_info = server_info_payload(sglang, decode_args())
    # the ranks registered with page size 32 (another prefill, or a restart with other flags)
    register_prefill_ranks(port, p_info, page_size=32, prefill_http_port=31000)
    with serve(p_info) as p, serve(d_info) as d:
        proc = kv("preflight", "--prefill", p.url, "--decode", d.url, "--format", "json")
        ignored = kv("preflight", "--prefill", p.url, "--decode", d.url, "--format", "json", "--ignore", "live-route")
    assert proc.returncode == 1, proc.stderr
    report = json.loads(proc.stdout)
    msgs = [f["message"] for f in report["findings"] if f["id"] == "live-route"]
    assert any("page_size=32" in m and "16" in m for m in msgs), msgs
    assert any("HTTP port 31000" in m for m in msgs), msgs
    assert report["verdict"] == "fail"
    # ignorable by id like any other check
    assert ignored.returncode == 0, ignored.stdout


def test_swapped_urls_warn_on_the_role_and_do_not_ask_a_bootstrap_server(sglang, bootstrap):
    port, _ = bootstrap
    p_info = server_info_payload(sglang, prefill_args(port))
    d_info = server_info_payload(sglang, decode_args())
    register_prefill_ranks(port, p_info)
    with serve(p_info) as p, serve(d_info) as d:
        proc = kv("preflight", "--prefill", d.url, "--decode", p.url, "--format", "json")
    assert proc.returncode == 1, proc.stderr
    ids = [f["id"] for f in json.loads(proc.stdout)["findings"]]
    assert ids.count("live-role") == 2 and "disaggregation-mode" in ids
    assert "live-route" not in ids


def test_model_not_readable_here_is_exit_2_and_says_so_then_model_config_works(sglang, bootstrap, tmp_path):
    port, _ = bootstrap
    mdir = tmp_path / "served-model"
    shutil.copytree(REPO / "configs" / "models" / MODEL, mdir)
    p_info = server_info_payload(sglang, prefill_args(port, **{"model-path": str(mdir)}))
    d_info = server_info_payload(sglang, decode_args(**{"model-path": str(mdir)}))
    p_srv, d_srv = serve(p_info), serve(d_info)  # /model_info read from the model dir
    shutil.rmtree(mdir)  # the model lives on the servers' nodes, not here
    register_prefill_ranks(port, p_info)
    with p_srv as p, d_srv as d:
        missing = kv("preflight", "--prefill", p.url, "--decode", d.url, "--format", "json")
        given = kv("preflight", "--prefill", p.url, "--decode", d.url, "--format", "json", "--model-config", str(REPO / "configs" / "models" / MODEL / "config.json"))
    assert missing.returncode == 2
    assert str(mdir) in missing.stderr and "LlamaForCausalLM" in missing.stderr and "--model-config" in missing.stderr
    assert given.returncode == 0, given.stderr
    assert json.loads(given.stdout)["verdict"] == "pass"


def test_in_process_side_keeps_only_flag_dests_and_no_secret(sglang, bootstrap):
    from kvcheck.sglang.flags import FlagTable
    from kvcheck.sources import load_side

    port, _ = bootstrap
    p_info = server_info_payload(sglang, prefill_args(port))
    register_prefill_ranks(port, p_info)
    with serve(p_info) as p:
        side = load_side(p.url, "prefill", api_key=API_KEY)
    assert set(side.raw_args) <= set(FlagTable.load().dests)
    assert "launch_command" not in side.raw_args and "version" not in side.raw_args
    assert side.raw_args["api_key"] == "<redacted>"
    assert side.args.page_size == 16 and side.args.attention_backend == p_info["attention_backend"]
    assert side.live["route"]["attn_tp_size"] == 2 and side.live["findings"] == []
    assert_no_secrets(side.model_dump_json())
