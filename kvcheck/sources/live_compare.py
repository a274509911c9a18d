"""Live comparisons: what a live prefill's bootstrap server reports on ``/route`` against
what its ``/server_info`` says (the decode acts on the bootstrap server's values), as
finding dicts (``live-route`` ...) that ``kvcheck.checks.live`` turns into Findings.
"""

from __future__ import annotations

from typing import Any

from kvcheck.sides import Side

# --------------------------------------------------------------------------------------
# comparisons -> finding dicts (turned into Findings by kvcheck.checks.live)
# --------------------------------------------------------------------------------------


def _finding(id: str, severity: str, message: str, fix: str) -> dict[str, str]:
    return {"id": id, "severity": severity, "message": message, "fix": fix}


def expected_route(side: Side) -> dict[str, Any]:
    """What this prefill's ranks register with the bootstrap server, from its resolved
    args (``CommonKVManager.register_to_bootstrap`` and ``_handle_route_put``, 0.5.23):
    ``dp_size`` is ``attn_dp_size`` when the system DP size is 1, else the DP size;
    CP-TP group sharing registers the CP width as TP and CP 1; ``kv_cache_dtype`` is
    the model runner's ``kv_cache_dtype_str``; ``prefill_http_port`` the server's port.
    """
    from kvcheck.preflight import resolved_kv_dtype_str

    a = side.args
    tp, cp = a.attn_tp_size, a.attn_cp_size
    extras = (side.live or {}).get("server_extras") or {}
    if extras.get("enable_cp_tp_group_sharing"):
        tp, cp = cp, 1
    out: dict[str, Any] = {
        "attn_tp_size": tp,
        "attn_cp_size": cp,
        "dp_size": a.resolved_attn_dp_size if a.dp_size == 1 else a.dp_size,
        "pp_size": a.pp_size,
        "page_size": a.page_size,
        "enable_kv_cache_sharding": a.enable_kv_cache_sharding,
        "prefill_http_port": side.raw_args.get("port"),
    }
    try:
        out["kv_cache_dtype"] = resolved_kv_dtype_str(side)
    except Exception:  # a model kvcheck cannot size: compare the flag string
        out["kv_cache_dtype"] = a.kv_cache_dtype
    return out


ROUTE_FIX = (
    "The decode acts on what the bootstrap server reports. Check that disaggregation_bootstrap_port (or --bootstrap) "
    "points at this prefill's own bootstrap server and that no other prefill registers there; restart the prefill so "
    "its ranks register again."
)


def live_findings(side: Side) -> list[dict[str, str]]:
    """Finding dicts (``id``, ``severity``, ``message``, ``fix``) for a live/snapshot side:

    * ``live-role`` (warning): the server's ``disaggregation_mode`` is not the CLI role;
    * ``live-version`` (warning): the server's ``/server_info`` version is not the release
      kvcheck judged it as (a version kvcheck does not model, judged as the modeled
      release ``--sglang-version`` names: ``kvcheck.sglang.releases.choose_release``);
    * ``live-model`` (warning): ``/model_info`` architectures do not include the model
      config's architecture (a ``--model-config`` for another model?);
    * ``live-route`` (error): the bootstrap server reports a value that differs from
      ``/server_info``; (warning) a snapshot of a prefill without a ``/route`` reply.
    """
    live = side.live or {}
    out: list[dict[str, str]] = []
    where = live.get("url") or live.get("snapshot") or side.origin
    mode = side.args.disaggregation_mode
    if mode != side.role:
        out.append(
            _finding(
                "live-role",
                "warning",
                f"the server at {where} reports disaggregation_mode={mode} but was given as --{side.role}",
                f"Give the {side.role} server's URL to --{side.role} (were --prefill and --decode swapped?), or "
                f"start that server with --disaggregation-mode {side.role}.",
            )
        )
    version = live.get("version")
    if version and side.sglang_version and version != side.sglang_version:
        out.append(
            _finding(
                "live-version",
                "warning",
                f"the server at {where} runs SGLang {version}; kvcheck judged it as SGLang {side.sglang_version} "
                f"({side.version_source}), so its verdict may not hold",
                "Drop --sglang-version for this side, or check this pair on a staging deployment running SGLang "
                f"{side.sglang_version}.",
            )
        )
    archs = (live.get("model_info") or {}).get("architectures") or []
    if archs and side.model.architecture not in archs:
        out.append(
            _finding(
                "live-model",
                "warning",
                f"the server at {where} serves {', '.join(archs)} but the model config kvcheck read "
                f"({side.model.source or 'model config'}) is {side.model.architecture}",
                "Pass the served model's own config.json with --model-config.",
            )
        )
    if side.role == "prefill":
        route = live.get("route")
        if route is None:
            if live.get("route_error") and mode == "prefill":
                out.append(
                    _finding(
                        "live-route",
                        "warning",
                        f"no bootstrap /route reply was captured for {where}: {live['route_error']}",
                        "Take the snapshot again once every prefill rank has registered, or run preflight against "
                        "the live prefill.",
                    )
                )
        else:
            expected = expected_route(side)
            for key, want in expected.items():
                got = route.get(key)
                if want is None or got is None or key not in route:
                    continue
                differs = str(got) != str(want) if key == "kv_cache_dtype" else got != want
                if differs:
                    from kvcheck.sources.limits import clip

                    got_r, want_r = clip(repr(got)), clip(repr(want))  # echoed values: never a 10 MB line
                    if key == "prefill_http_port":
                        what = (
                            f"the bootstrap server at {live.get('route_url')} was registered by a prefill with "
                            f"HTTP port {got}, not by this server (port {want}): it belongs to another prefill"
                        )
                    else:
                        what = (
                            f"the bootstrap server at {live.get('route_url')} reports {key}={got_r}, /server_info of "
                            f"{where} says {want_r}; "
                            "kvcheck's plan used /server_info, the decode will use the bootstrap server's value"
                        )
                    out.append(_finding("live-route", "error", what, ROUTE_FIX))
    return out
