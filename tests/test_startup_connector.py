"""The scheduler-phase start-up refusals (``kvcheck.sglang.startup.connector_outcome`` and
the ``connector-startup`` check) against SGLang 0.5.23's own functions on CPU:
``nixl.conn._resolve_ucx_device_list`` (which calls ``mooncake_transfer_engine.
get_ib_devices_for_gpu`` / ``parse_ib_device_config``) for every ``--disaggregation-ib-device``
shape, and the exact texts of the staging and device_list refusals (compared with the
runtime source by the catalog's source-literal test, tests/test_explain_runtime.py)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from kvcheck.checks import REGISTRY, CheckContext
from kvcheck.checks.base import Severity
from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.model import parse_model_config
from kvcheck.sglang.startup import ConnectorRefusal, Stop, connector_outcome, ucx_device_list
from kvcheck.sides import Side

MODELS = Path(__file__).resolve().parent.parent / "configs" / "models"


def side(role: str, model: str, flags: dict, env: dict | None = None) -> Side:
    cfg = MODELS / model / "config.json"
    flags = {"disaggregation_mode": role, "disaggregation_transfer_backend": "nixl", **flags}
    return Side(role=role, args=ServerArgs(model_path=str(MODELS / model), **flags), raw_args=dict(flags), env=dict(env or {}),
                model=parse_model_config(json.loads(cfg.read_text()), str(cfg)), origin=f"{role} test flags")


IB_DEVICES = [
    "mlx5_0",
    "mlx5_0,mlx5_1",
    " mlx5_0 , mlx5_1 ",
    "mlx5_0:1",
    "mlx5_0,mlx5_1:1",
    "mlx5_0,",
    '{"0": "mlx5_0", "1": "mlx5_1"}',
    '{"0": "mlx5_0:1", "1": "mlx5_1"}',
    '{"0": "mlx5_0"}',
    '{"0": 1}',
    '{"x": "mlx5_0"}',
    "{}",
    "{not json",
    '["mlx5_0"]',
]


@pytest.mark.runtime
@pytest.mark.parametrize("ib", IB_DEVICES)
@pytest.mark.parametrize("tp", [1, 2])
def test_ucx_device_list_matches_runtime(ib, tp):
    """kvcheck's device list (or refusal) for the server's first failing GPU equals what the
    runtime's ``_resolve_ucx_device_list`` returns (or raises) on each GPU the server binds."""
    pytest.importorskip("sglang")
    from sglang.srt.disaggregation.nixl.conn import _resolve_ucx_device_list

    s = side("decode", "llama-3.1-8b", {"tp_size": tp, "disaggregation_ib_device": ib})
    runtime = None
    for gpu_id in range(tp):
        try:
            got = _resolve_ucx_device_list(ib, gpu_id)
        except Exception as exc:  # noqa: BLE001  (the runtime's own exception, compared below)
            runtime = (type(exc).__name__, str(exc))
            break
        if gpu_id == 0:
            runtime = got
    predicted = ucx_device_list(s)
    if isinstance(runtime, tuple):
        assert isinstance(predicted, ConnectorRefusal)
        assert (predicted.type, predicted.message) == runtime
    else:
        assert predicted == runtime


def test_conflicting_device_list_in_params():
    env = {"SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS": json.dumps({"device_list": "mlx5_1"})}
    r = connector_outcome(side("prefill", "llama-3.1-8b", {"disaggregation_ib_device": "mlx5_0"}, env))
    assert isinstance(r, ConnectorRefusal) and r.id == "nixl-ib-device" and r.message.startswith("Conflicting NIXL UCX device_list")
    same = {"SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS": json.dumps({"device_list": "mlx5_0,mlx5_1"})}
    assert connector_outcome(side("prefill", "llama-3.1-8b", {"disaggregation_ib_device": "mlx5_0, mlx5_1"}, same)) is None
    # another backend, or UCX_NET_DEVICES, and the runtime never reads the ib device for NIXL
    assert connector_outcome(side("prefill", "llama-3.1-8b", {"disaggregation_ib_device": "mlx5_0:1"},
                                  {"SGLANG_DISAGGREGATION_NIXL_BACKEND": "LIBFABRIC"})) is None
    assert connector_outcome(side("prefill", "llama-3.1-8b", {"disaggregation_ib_device": "mlx5_0:1"}, {"UCX_NET_DEVICES": "mlx5_0:1"})) is None


def test_json_file_is_unchecked():
    assert isinstance(connector_outcome(side("decode", "llama-3.1-8b", {"disaggregation_ib_device": "/etc/ib.json"})), Stop)


def test_staging_buffer_on_mla():
    env = {"SGLANG_DISAGG_STAGING_BUFFER": "true"}
    for role in ("prefill", "decode"):
        r = connector_outcome(side(role, "deepseek-v3", {}, env))
        assert isinstance(r, ConnectorRefusal) and r.id == "staging-mla" and r.type == "RuntimeError"
        assert r.hook == ("PrefillBootstrapQueue.__init__" if role == "prefill" else "DecodePreallocQueue.__init__")
    assert connector_outcome(side("decode", "llama-3.1-8b", {}, env)) is None
    assert connector_outcome(side("decode", "deepseek-v3", {}, {"SGLANG_DISAGG_STAGING_BUFFER": "0"})) is None


def test_check_reports_each_side_and_the_ucx_override():
    p = side("prefill", "llama-3.1-8b", {"disaggregation_ib_device": "mlx5_0:1"})
    d = side("decode", "llama-3.1-8b", {"disaggregation_ib_device": "mlx5_0"}, {"UCX_NET_DEVICES": "mlx5_1:1"})
    findings = REGISTRY["connector-startup"].run(CheckContext(prefill=p, decode=d, prefill_geometry=None, decode_geometry=None, plan=None))
    assert [(f.id, f.severity) for f in findings] == [("nixl-ib-device", Severity.ERROR), ("connector-startup", Severity.WARNING)]
    assert findings[0].runtime_error.message == ("NIXL UCX --disaggregation-ib-device requires HCA names without port suffixes "
                                                 "(e.g. mlx5_0); NIXL appends port 1.")
    assert findings[0].runtime_error.when == "start-up"


@pytest.mark.runtime
def test_no_kv_manager_accepts_decode_host_destinations():
    """Every KV manager class SGLang 0.5.23 ships answers ``supports_host_destination`` False,
    so a decode with host receive (threshold < 1) that passes argument resolution still exits
    in ``DecodePreallocQueue._init_kv_manager``; kvcheck predicts that for every backend."""
    pytest.importorskip("sglang")
    import importlib

    for module, cls in (("sglang.srt.disaggregation.nixl.conn", "NixlKVManager"),
                        ("sglang.srt.disaggregation.mooncake.conn", "MooncakeKVManager"),
                        ("sglang.srt.disaggregation.fake.conn", "FakeKVManager")):
        try:
            manager = getattr(importlib.import_module(module), cls)
        except ImportError:
            continue
        assert manager.supports_host_destination is False
    for backend in ("nixl", "mooncake"):
        r = connector_outcome(side("decode", "llama-3.1-8b", {"disaggregation_transfer_backend": backend,
                                                               "disaggregation_decode_host_receive_threshold": 0.5}))
        assert isinstance(r, ConnectorRefusal) and r.id == "decode-host-destination"
        assert r.message == "Transfer backend does not support decode host KV destinations"


@pytest.mark.parametrize("ib,tp,entry", [
    ("mlx5_0:1", 1, "ib-device-port-suffix"),
    ('{"0": "mlx5_0"}', 2, "ib-device-no-gpu"),
    ("{0: mlx5_0}", 1, "ib-device-invalid-json"),
])
def test_predicted_ib_device_refusal_is_explained(ib, tp, entry):
    """The predicted text is recognized by `kvcheck explain` as the entry whose check is nixl-ib-device."""
    from kvcheck.explain import explain_text, load_catalog

    r = connector_outcome(side("decode", "llama-3.1-8b", {"tp_size": tp, "disaggregation_ib_device": ib}))
    hits = explain_text(f"{r.type}: {r.message}").hits
    assert hits and hits[0].entry_id == entry and hits[0].match == "full"
    assert load_catalog().get(entry).check == r.id == "nixl-ib-device"


# ------------------------------------------------------------------------------------------
# SGLANG_DISAGG_STAGING_BUFFER's chunk/page grid check in PrefillBootstrapQueue.__init__
# (SGLang 0.5.17 .. 0.5.23), driven on the runtime's own resolved args.

STAGING_ENV = {"SGLANG_DISAGG_STAGING_BUFFER": "1"}
STAGING_CHUNK_CASES = [
    ("chunk-off", {"chunked_prefill_size": -1, "page_size": 64}, "staging-chunk-size"),
    ("chunk-off-page-1", {"chunked_prefill_size": -1}, "staging-chunk-size"),
    ("chunk-off-attn-dp", {"chunked_prefill_size": -1, "tp_size": 2, "attn_dp_size": 2, "page_size": 16}, "staging-chunk-size"),
    ("chunk-aligned", {"chunked_prefill_size": 4096, "page_size": 64}, None),
    ("chunk-default", {"page_size": 64}, None),
    ("chunk-zero-is-8192", {"chunked_prefill_size": 0, "page_size": 64}, None),
    ("chunk-off-pp", {"chunked_prefill_size": -1, "pp_size": 2}, "staging-chunk-size"),
    ("chunk-aligned-pp-nixl", {"chunked_prefill_size": 4096, "pp_size": 2, "page_size": 16}, "staging-mla"),
    ("chunk-aligned-pp-mooncake", {"chunked_prefill_size": 4096, "pp_size": 2, "disaggregation_transfer_backend": "mooncake"}, None),
]


def _flags(case_flags: dict) -> dict:
    return {"disaggregation_mode": "prefill", "disaggregation_transfer_backend": "nixl", **case_flags}


@pytest.fixture(scope="module")
def staging_runtime(tmp_path_factory) -> dict:
    """The runtime's ``PrefillBootstrapQueue.__init__`` outcome per case, from
    tests/staging_queue_worker.py in its own process: importing SGLang's prefill module
    needs ``openai`` (its protocol types), which the test environment installs beside the
    older releases (.venv/sglang-releases/_deps, scripts/setup-test-env.sh), not in the
    process that runs the other tests."""
    import os
    import shutil
    import subprocess
    import sys

    pytest.importorskip("sglang")
    repo = Path(__file__).resolve().parent.parent
    deps = Path(os.environ.get("KVCHECK_SGLANG_RELEASES_DIR") or (Path(sys.prefix) / "sglang-releases")) / "_deps"
    model_dir = tmp_path_factory.mktemp("staging") / "llama-3.1-8b"
    model_dir.mkdir()
    shutil.copy(MODELS / "llama-3.1-8b" / "config.json", model_dir / "config.json")
    env = dict(os.environ, PYTHONPATH=os.pathsep.join([str(repo), str(repo / "tests"), str(repo / "tests" / "stubs"), str(deps)]))
    cases = {name: _flags(flags) for name, flags, _ in STAGING_CHUNK_CASES}
    proc = subprocess.run([sys.executable, str(repo / "tests" / "staging_queue_worker.py"), str(model_dir)],
                          input=json.dumps({"cases": cases, "env": STAGING_ENV}), env=env, capture_output=True, text=True, timeout=600)
    if proc.returncode == 3:
        pytest.skip(proc.stdout.strip().splitlines()[-1])
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


@pytest.mark.runtime
@pytest.mark.parametrize("name,flags,expected_id", STAGING_CHUNK_CASES, ids=[c[0] for c in STAGING_CHUNK_CASES])
def test_staging_chunk_grid_matches_runtime(staging_runtime, name, flags, expected_id):
    """kvcheck's staging checks on a prefill (``connector_outcome``) give the runtime's own
    ``PrefillBootstrapQueue.__init__`` outcome, text included, on the runtime's resolved
    page size and chunked-prefill size."""
    flags = _flags(flags)
    runtime = staging_runtime[name]
    runtime = tuple(runtime) if runtime is not None else None
    assert runtime is None or runtime[0] == "queue", runtime  # the args themselves are accepted
    s = side("prefill", "llama-3.1-8b", flags, STAGING_ENV)
    s.gpu = "h100"
    from kvcheck.sglang.startup import first_outcome

    assert first_outcome(s) is None
    predicted = connector_outcome(s)
    if expected_id is None:
        assert runtime is None and predicted is None, (runtime, predicted)
        return
    assert isinstance(predicted, ConnectorRefusal) and predicted.id == expected_id, predicted
    assert runtime[1:] == (predicted.type, predicted.message)
    assert predicted.hook == "PrefillBootstrapQueue.__init__"


def test_staging_chunk_grid_by_release():
    """The grid check exists from 0.5.17 (disaggregation/prefill.py of each release's wheel);
    0.5.17 refused PP with staging on every backend, 0.5.18 on all but Mooncake; before 0.5.17
    PP with staging is not restated (unchecked, never a pass)."""
    s = side("prefill", "llama-3.1-8b", {"chunked_prefill_size": -1}, STAGING_ENV)
    pp = side("prefill", "llama-3.1-8b", {"chunked_prefill_size": 4096, "pp_size": 2}, STAGING_ENV)
    for release, chunk_id, pp_out in (("0.5.23", "staging-chunk-size", "SGLANG_DISAGG_STAGING_BUFFER with pp_size > 1 is only supported by Mooncake."),
                                      ("0.5.17", "staging-chunk-size", "SGLANG_DISAGG_STAGING_BUFFER does not support pp_size > 1."),
                                      ("0.5.16", None, Stop)):
        s.sglang_version = pp.sglang_version = release
        r = connector_outcome(s)
        assert (r.id if isinstance(r, ConnectorRefusal) else None) == chunk_id, (release, r)
        r = connector_outcome(pp)
        assert isinstance(r, Stop) if pp_out is Stop else r.message == pp_out, (release, r)
