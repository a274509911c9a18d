"""Bootstrap (decode): the decode's checks of the prefill's ``/route`` reply, driven on a
decode ``NixlKVManager`` (``try_ensure_parallel_info``, 0.5.10 on) or through
``CommonKVReceiver.__init__`` on the v1 reply (before 0.5.10).
"""

from __future__ import annotations

import dataclasses
from types import SimpleNamespace
from typing import Any

from kvcheck.sglang.plan import (
    DECODE_FIRST_REQUEST,
    DECODE_RECEIVER_V1,
    DECODE_SCHEDULER,
    PairInfo,
    RuntimeErrorPrediction,
)
from kvcheck.sglang.runtime_kernel.driver import (
    _BOOTSTRAP_ADDR,
    KernelSetupError,
    _lock,
    _sglang,
    raised,
)

# ---------------------------------------------------------------- bootstrap (decode) --


class _RouteResponse:
    status_code = 200

    def __init__(self, payload: dict):
        self._payload = payload
        self.text = ""

    def json(self) -> dict:
        return dict(self._payload)


def _route_payload(sg: SimpleNamespace, prefill: PairInfo) -> dict:
    """The ``/route`` reply, as the installed release's ``_handle_route_get`` builds it
    (``dataclasses.asdict`` of its ``PrefillServerInfo``, minus the layout keys it drops
    when unset). Fields the release does not have are not passed."""
    fields = {f.name for f in dataclasses.fields(sg.common.PrefillServerInfo)}
    wanted = dict(
        attn_tp_size=prefill.attn_tp_size,
        attn_cp_size=prefill.attn_cp_size,
        dp_size=1,
        pp_size=prefill.pp_size,
        page_size=prefill.page_size,
        kv_cache_dtype=prefill.kv_cache_dtype_str if _resolved_dtype(sg) else prefill.flag_dtype,
        follow_bootstrap_room=True,
        enable_dsa_cache_layer_split=False,
        enable_kv_cache_sharding=prefill.enable_kv_cache_sharding,
        kv_layout=prefill.kv_layout,
        dsv41_spec_layout=prefill.dsv41_spec_layout,
    )
    info = sg.common.PrefillServerInfo(**{k: v for k, v in wanted.items() if k in fields})
    payload = dataclasses.asdict(info)
    for key in ("dsv41_spec_layout", "kv_layout"):
        if payload.get(key) is None:
            payload.pop(key, None)
    return payload


def _resolved_dtype(sg: SimpleNamespace) -> bool:
    """True when the installed release compares ``kv_cache_dtype_str`` (0.5.17 on), False
    when it compares ``server_args.kv_cache_dtype`` (0.5.10 .. 0.5.16)."""
    import inspect

    return "self.kv_cache_dtype_str" in inspect.getsource(sg.common.CommonKVManager.try_ensure_parallel_info)


def _state_types(sg: SimpleNamespace, values: list[str]) -> list:
    StateType = getattr(sg.base_conn, "StateType", None)
    if StateType is None:
        if values:
            raise KernelSetupError("this SGLang release has no StateType; state components cannot be driven")
        return []
    return [StateType(v) for v in values]


def _decode_manager(sg: SimpleNamespace, decode: PairInfo):
    kv_args = sg.KVArgs()
    kv_args.page_size = decode.page_size
    kv_args.engine_rank = 0
    kv_args.state_types = _state_types(sg, decode.state_types)
    kv_args.kv_cache_dtype_str = decode.kv_cache_dtype_str
    mgr = object.__new__(sg.nixl.NixlKVManager)
    mgr.kv_args = kv_args
    mgr.kv_cache_dtype_str = decode.kv_cache_dtype_str
    # 0.5.10 .. 0.5.16 read the flag and --enable-hisparse from server_args.
    mgr.server_args = SimpleNamespace(kv_cache_dtype=decode.flag_dtype, enable_hisparse=decode.hisparse)
    mgr.kv_layout = decode.kv_layout
    mgr.dsv41_spec_layout = decode.dsv41_spec_layout
    mgr.prefill_info_table = {}
    mgr.is_mla_backend = decode.is_mla
    mgr.is_hybrid_mla_backend = decode.is_hybrid_mla
    mgr.attn_tp_size = decode.attn_tp_size
    mgr.attn_cp_size = decode.attn_cp_size
    mgr.attn_cp_rank = 0
    mgr.dcp_size = decode.dcp_size
    mgr.dcp_rank = 0
    mgr.pp_size = decode.pp_size
    mgr.pp_rank = 0
    mgr.enable_all_cp_ranks_for_transfer = False
    return mgr


def bootstrap_error(prefill: PairInfo, decode: PairInfo, behaviour: Any = None) -> RuntimeErrorPrediction | None:
    """The decode's checks on the prefill's ``/route`` reply, by the runtime itself.

    Drives the installed release's ``CommonKVManager.try_ensure_parallel_info`` (and
    through it ``_resolve_rank_mapping``) on a decode ``NixlKVManager`` made with
    ``object.__new__``; the reply comes from a stand-in for ``requests.get``. Returns the
    exception it raises (class name, ``str()``), or ``None`` when the decode accepts the
    prefill. ``behaviour`` is accepted for interface parity and ignored: the installed
    release decides. Raises ``KernelSetupError`` when the release has no
    ``try_ensure_parallel_info`` (before 0.5.10) or the stand-in lacks what it reads.
    """
    sg = _sglang()
    if not hasattr(sg.common.CommonKVManager, "try_ensure_parallel_info") and hasattr(
        sg.common.CommonKVReceiver, "_get_prefill_parallel_info_from_server"
    ):
        return _bootstrap_error_v1(sg, prefill, decode)  # 0.5.5 .. 0.5.9
    if not hasattr(sg.common.CommonKVManager, "try_ensure_parallel_info"):
        raise KernelSetupError(
            f"SGLang {sg.version} has no try_ensure_parallel_info (its decode checks the prefill in CommonKVReceiver)"
        )
    mgr = _decode_manager(sg, decode)
    payload = _route_payload(sg, prefill)
    calls: list[str] = []

    def fake_get(url: str, timeout: Any = None) -> _RouteResponse:
        calls.append(url)
        return _RouteResponse(payload)

    ok, verdict = _drive(sg, fake_get, lambda: mgr.try_ensure_parallel_info(_BOOTSTRAP_ADDR), DECODE_SCHEDULER)
    if verdict is not None:
        return verdict
    if not ok or not calls or "/route?" not in calls[0]:
        raise KernelSetupError("SGLang's try_ensure_parallel_info did not take the stand-in /route reply")
    return None


def _bootstrap_error_v1(sg: SimpleNamespace, prefill: PairInfo, decode: PairInfo) -> RuntimeErrorPrediction | None:
    """The decode's checks before 0.5.10, by the runtime itself: the release's
    ``CommonKVReceiver.__init__`` (which fetches the v1 ``/route?engine_rank=-1&...`` reply
    through ``_get_prefill_parallel_info_from_server``, checks it, and fetches each target
    rank's bootstrap info) on a receiver and a decode ``NixlKVManager`` made with
    ``object.__new__``. The v1 reply is what ``CommonKVBootstrapServer._handle_route_get``
    returns (``prefill_attn_tp_size``, ``prefill_dp_size``, ``prefill_pp_size``, and from
    0.5.8 ``prefill_page_size``), handed through a stand-in for ``requests.get``; each
    rank's info is a loopback address (``CommonKVReceiver._register_kv_args`` sends
    nothing). Returns the exception it raises, or None."""
    kv_args = sg.KVArgs()
    kv_args.page_size = decode.page_size
    kv_args.engine_rank = 0
    mgr = object.__new__(sg.nixl.NixlKVManager)
    mgr.kv_args = kv_args
    mgr.request_status = {}
    mgr.is_mla_backend = decode.is_mla
    mgr.attn_tp_size = decode.attn_tp_size
    mgr.pp_size, mgr.pp_rank = decode.pp_size, 0
    mgr.connection_pool, mgr.required_prefill_response_num_table = {}, {}
    (
        mgr.prefill_attn_tp_size_table,
        mgr.prefill_dp_size_table,
        mgr.prefill_pp_size_table,
        mgr.prefill_page_size_table,
    ) = {}, {}, {}, {}
    payload = {
        "prefill_attn_tp_size": prefill.attn_tp_size,
        "prefill_dp_size": 1,
        "prefill_pp_size": prefill.pp_size,
        "prefill_page_size": prefill.page_size,
    }
    calls: list[str] = []

    def fake_get(url: str, timeout: Any = None) -> _RouteResponse:
        calls.append(url)
        return _RouteResponse(payload if "engine_rank=-1" in url else {"rank_ip": "127.0.0.1", "rank_port": 1})

    # CommonKVReceiver is abstract (init, poll); a bare subclass keeps its own
    # _register_kv_args (which sends nothing) and __init__.
    receiver_cls = type(
        "KvcheckReceiver",
        (sg.common.CommonKVReceiver,),
        {"init": lambda self, *a, **k: None, "poll": lambda self: None},
    )
    receiver: Any = object.__new__(receiver_cls)
    _, verdict = _drive(
        sg,
        fake_get,
        lambda: sg.common.CommonKVReceiver.__init__(receiver, mgr, _BOOTSTRAP_ADDR, 0, 0),
        DECODE_RECEIVER_V1,
    )
    if verdict is not None:
        return verdict
    if not calls or "engine_rank=-1" not in calls[0] or receiver.bootstrap_infos is None:
        raise KernelSetupError("SGLang's CommonKVReceiver did not take the stand-in v1 /route reply")
    return None


def _drive(sg: SimpleNamespace, fake_get: Any, call: Any, raised_by: str) -> tuple[Any, RuntimeErrorPrediction | None]:
    """Run the decode's ``call`` with the stand-in ``requests.get`` (the one the runtime's
    ``common/conn.py`` makes for ``/route``): (its result, None), or (None, the runtime's
    own verdict) when it raises. A missing attribute is a gap in the stand-in, not a
    verdict: ``KernelSetupError``."""
    with _lock:
        real_requests = sg.common.requests
        sg.common.requests = SimpleNamespace(get=fake_get)
        try:
            return call(), None
        except AttributeError as exc:  # a gap in the stand-in, not the runtime's verdict
            raise KernelSetupError(f"the stand-in decode manager lacks what SGLang reads: {exc}") from exc
        except Exception as exc:  # the runtime's own verdict
            return None, raised(exc, raised_by, "first request", DECODE_FIRST_REQUEST)
        finally:
            sg.common.requests = real_requests
