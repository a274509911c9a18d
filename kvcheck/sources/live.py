"""Live SGLang servers (and saved snapshots of them) as inputs -> ``Side``.

What kvcheck reads from a running SGLang 0.5.23 server, over HTTP(S), with GET only:

* ``GET /server_info`` (falling back to the deprecated ``/get_server_info``): the
  *resolved* server args, flat, by dest name, plus ``version`` and non-arg keys
  (``launch_command``, ``internal_states``, scheduler info, ...). Resolved values beat
  flags: the page size and attention backend are the ones the server actually chose.
  kvcheck keeps only keys that are SGLang flags' dests (``kvcheck.sglang.flags``),
  types them like any other input (``build_side``) and redacts secrets
  (``kvcheck.sources.redact``) before anything is stored, printed or saved.
* ``GET /model_info`` (fallback ``/get_model_info``): served model path, architectures,
  the server's ``disaggregation_mode``; used for messages and the ``live-model`` check.
* For a prefill only: its bootstrap server's read-only
  ``GET /route?prefill_dp_rank=-1&prefill_cp_rank=-1&target_tp_rank=-1&target_pp_rank=-1``,
  exactly what a decode asks first (``CommonKVManager.try_ensure_parallel_info``). The
  bootstrap server is at ``http://<server host>:<disaggregation_bootstrap_port>`` unless
  ``bootstrap=`` (``--bootstrap URL``) says otherwise. It answers 503 until every prefill
  rank registered (``PUT /route``); kvcheck retries a 503 until the deadline. What it
  reports (page size, kv-cache dtype string, attention TP/CP, DP, PP, the registering
  prefill's HTTP port) is compared with ``/server_info``: a disagreement is a finding
  (``live-route``), because the decode acts on the bootstrap server's values.

kvcheck never sends ``PUT /route``, ``POST /register_dp_rank`` or any other write.
The only read-only POST the bootstrap server has (``/query_dp_ranks``) is not needed.

Timing: one overall ``deadline`` (seconds) per live source, counted from its first
request and shared by all its requests (``/server_info``, ``/model_info``, and its
bootstrap server's ``/route``). It holds whatever the server does: bodies are streamed and
the deadline is checked at every chunk (a body trickled one byte a second), retries of
connection errors and 502/503/504 (0.2 s growing to 1 s apart) stop at it, redirects are
never followed, and the whole capture runs in a worker thread that ``capture`` abandons at
the deadline + ``WATCHDOG_GRACE`` (headers trickled one byte at a time, a stalled TLS
handshake). Every connect also has ``connect_timeout``.

Limits (``kvcheck.sources.limits``): at most ``MAX_BODY_BYTES`` are read from the wire and
``MAX_INFLATED_BYTES`` after gzip/deflate (inflated incrementally, so a bomb never fills
memory; other encodings are refused), JSON nested deeper than ``MAX_DEPTH`` is refused.

Exit statuses (``kvcheck.errors``), and what raises them here:

* 3 (``LiveSourceError``, an ``UnreachableError``): the live source did not give a usable
  answer in time: connection refused/reset, DNS failure, connect or read timeout,
  502/503/504 until the deadline (a ``/route`` 503 is reported as "prefill not fully
  registered" with the bootstrap server's own text), any other unexpected status, a
  body that is not JSON (malformed, invalid UTF-8, nested too deep, ``null``) or not an
  object, a body past the size limits, or JSON that is not SGLang's.
  Retrying later (a Kubernetes Job's backoff) may help.
* 2 (``InputError``): the invocation is wrong and retrying will not help: a bad URL, a
  401/403 (no ``--api-key``/``KVCHECK_API_KEY``, or a refused one), the served model's
  ``config.json`` not readable here without ``--model-config``, a broken snapshot file.

Response bodies are never echoed: of a 502/503/504 body only the worker count of the
bootstrap server's own "Prefill server not fully registered yet (N workers registered)."
is reported. Every secret value found in any answer is redacted and registered
process-wide (``kvcheck.sources.redact``), so no output repeats it.

Modules: ``live_client`` (HTTP, deadline, watchdog, the three reads), ``live`` (capture,
snapshots, the ``Side``), ``live_compare`` (``/route`` against ``/server_info``),
``live_strict`` (types and header text). This module re-exports what callers use.
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
from pathlib import Path
from typing import Any

from kvcheck.errors import InputError
from kvcheck.release.manifest import NEWEST as MODELED_VERSION  # noqa: F401  (written once, in the manifest)
from kvcheck.sides import Role, Side
from kvcheck.sources.live_client import (  # noqa: F401  (re-exported)
    API_KEY_ENV,
    DEFAULT_CONNECT_TIMEOUT,
    DEFAULT_DEADLINE,
    MODEL_INFO_KEYS,
    NOT_FOUND,
    RETRY_STATUSES,
    ROUTE_PATH,
    ROUTE_QUERY,
    WATCHDOG_GRACE,
    LiveOptions,
    LiveSourceError,
    _Client,
    _Deadline,
    _with_watchdog,
    bootstrap_url_for,
    fetch_model_info,
    fetch_route,
    fetch_server_info,
    normalize_url,
)
from kvcheck.sources.live_compare import ROUTE_FIX, expected_route, live_findings  # noqa: F401  (re-exported)
from kvcheck.sources.live_strict import _header_text, _mistyped_fields  # noqa: F401
from kvcheck.sources.redact import (
    REDACTED,
    redact,
    redact_url,
    scrub,
)

SNAPSHOT_FORMAT = 1
# non-dest /server_info keys kvcheck keeps (on Side.live["server_extras"]) because they
# change what the prefill registers with the bootstrap server.
SERVER_EXTRA_KEYS = ("enable_cp_tp_group_sharing", "version", "frontend")


def capture(spec: str, role: Role | None = None, **live_options: Any) -> dict[str, Any]:
    """Read a live server and return a redacted snapshot (the ``kvcheck snapshot`` file).

    ``role``: ``"prefill"`` also reads the bootstrap server's ``/route``; ``None`` takes
    the server's own ``disaggregation_mode``. Shape::

        {"kvcheck_snapshot": 1, "captured_at": ISO-8601 UTC, "url": str, "role": str|None,
         "server_info_endpoint": str, "server_info": {...redacted, complete...},
         "model_info": {...}|None, "route": {...}|None, "route_url": str|None,
         "route_error": str|None}

    A failing ``/server_info`` raises (``LiveSourceError`` exit 3, ``InputError`` exit 2);
    a failing ``/route`` is recorded in ``route_error`` only when ``tolerate_route`` is set
    in ``live_options`` (the ``snapshot`` command), else it raises too.
    """
    tolerate_route = bool(live_options.pop("tolerate_route", False))
    opts = LiveOptions.from_kwargs(**live_options)
    base = normalize_url(spec)
    deadline = _Deadline(opts.deadline)
    state: dict[str, str] = {}
    return _with_watchdog(
        lambda: _capture(base, role, opts, deadline, state, tolerate_route), deadline, redact_url(base), state
    )


def _capture(
    base: str, role: Role | None, opts: LiveOptions, deadline: _Deadline, state: dict[str, str], tolerate_route: bool
) -> dict[str, Any]:
    """``capture``'s work, in the watchdog's worker thread."""
    from kvcheck.sources.redact import collect_secrets, register_secrets

    with _Client(base, opts, deadline, send_auth=True, role_hint=role or "live", state=state) as client:
        info, endpoint = fetch_server_info(client)
        model_info = fetch_model_info(client)
    # Every secret value any answer carries (by field name, URL credentials, JSON in
    # strings), registered process-wide so every output is scrubbed of it too.
    state["doing"] = f"searching the answer of {redact_url(base)}{endpoint} for secrets (a large or heavy answer)"
    secrets = collect_secrets(info, [opts.api_key] if opts.api_key else [])
    secrets |= collect_secrets(model_info)
    register_secrets(secrets)
    info = redact(info, secrets)
    mode = info.get("disaggregation_mode")
    if role is None and mode in ("prefill", "decode"):
        role = mode
    route = route_url = route_error = None
    if role == "prefill" and mode not in (None, "prefill"):
        # No bootstrap server runs there; the live-role check says what is wrong.
        route_error = f"not read: the server runs disaggregation_mode={mode}, so it has no bootstrap server"
    elif role == "prefill":
        route_url = bootstrap_url_for(base, info, opts.bootstrap)
        try:
            route = fetch_route(route_url, opts, deadline, state)
        except LiveSourceError as exc:
            if not tolerate_route:
                raise
            route_error = scrub(str(exc), secrets)
        route_url = redact_url(route_url)
        if route is not None:
            secrets |= collect_secrets(route)
            register_secrets(secrets)
    return {
        "kvcheck_snapshot": SNAPSHOT_FORMAT,
        "captured_at": _dt.datetime.now(_dt.UTC).isoformat(timespec="seconds"),
        "url": redact_url(base),
        "role": role,
        "server_info_endpoint": endpoint,
        "server_info": redact(info, secrets),
        "model_info": redact(model_info, secrets) if model_info is not None else None,
        "route": redact(route, secrets) if route is not None else None,
        "route_url": route_url,
        "route_error": route_error,
    }


def write_snapshot(snapshot: dict[str, Any], path: Path | str) -> None:
    """Save ``snapshot`` (from ``capture``) as indented JSON, redacted once more, mode
    0600; ``"-"`` writes to stdout."""
    from kvcheck.sources.redact import scrub_tree

    # Scrubbed value by value (a text-level scrub could cut a JSON escape in two), then
    # written as strict JSON: a snapshot is always valid input to kvcheck again.
    text = json.dumps(scrub_tree(redact(snapshot)), indent=2, sort_keys=False, default=str, allow_nan=False) + "\n"
    if str(path) == "-":
        import sys

        sys.stdout.write(text)
        return
    p = Path(path)
    fd = os.open(p, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w", encoding="utf-8") as fh:
        fh.write(text)


def load_live_side(
    spec: str,
    role: Role,
    *,
    model_config: Path | None = None,
    draft_model_config: Path | None = None,
    env_file: Path | None = None,
    gpu: str | None = None,
    sglang_version: str | None = None,
    models_dir: Path | None = None,
    **live_options: Any,
) -> Side:
    """A ``Side`` from a running server at ``spec`` (``http(s)://host:port``).

    ``role`` is the CLI position (``--prefill``/``--decode``); a prefill's bootstrap
    ``/route`` is read too. ``live_options``: see ``LiveOptions`` (``api_key``,
    ``bootstrap``, ``connect_timeout``, ``deadline`` in seconds, ``verify``,
    ``transport``). ``Side.live`` holds the redacted URL, version, trimmed model info,
    the route reply and ``findings`` (dicts turned into findings by ``kvcheck.checks.live``).

    Raises ``LiveSourceError`` (exit 3) and ``InputError`` (exit 2), see the module doc.
    """
    snap = capture(spec, role, **live_options)
    bad = _mistyped_fields(snap.get("server_info") or {})
    if bad:
        raise LiveSourceError(
            f"could not read the live source: GET {snap['url']}{snap.get('server_info_endpoint') or '/server_info'} "
            "answered "
            f"{', '.join(bad)} with a value of a JSON type that SGLang's flag cannot hold (malformed server info)",
            url=snap["url"],
        )
    return side_from_snapshot(
        snap,
        role,
        origin=snap["url"],
        model_config=model_config,
        draft_model_config=draft_model_config,
        env_file=env_file,
        gpu=gpu,
        sglang_version=sglang_version,
        models_dir=models_dir,
    )


def load_snapshot_side(
    path: Path,
    data: dict[str, Any],
    role: Role,
    *,
    model_config: Path | None = None,
    draft_model_config: Path | None = None,
    env_file: Path | None = None,
    gpu: str | None = None,
    sglang_version: str | None = None,
    models_dir: Path | None = None,
) -> Side:
    """A ``Side`` from a saved ``kvcheck snapshot`` file (already parsed: ``data``), offline.

    Raises ``InputError`` (exit 2) when ``data`` is not a snapshot kvcheck can read.
    """
    info = data.get("server_info")
    if not isinstance(info, dict):
        raise InputError(
            "a kvcheck snapshot needs a JSON object under 'server_info'", source=str(path), field="server_info"
        )
    for key in ("route", "model_info"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise InputError(f"'{key}' must be a JSON object or null", source=str(path), field=key)
    snap = redact(data)
    snap.setdefault("url", None)
    return side_from_snapshot(
        snap,
        role,
        origin=str(path),
        model_config=model_config,
        draft_model_config=draft_model_config,
        env_file=env_file,
        snapshot_path=str(path),
        gpu=gpu,
        sglang_version=sglang_version,
        models_dir=models_dir,
    )


def server_args_from_info(
    info: dict[str, Any], source: str, version: str | None = None
) -> tuple[dict[str, Any], list[str]]:
    """``/server_info`` -> ``(args, dropped)``: only keys that are SGLang 0.5.23 flag
    dests (``help``/``config`` excluded), typed as the parser would store them
    (``FlagTable.coerce(origin="json")``); ``dropped``: the other keys' names.

    A value that does not type (version skew) is kept as given, so ``build_side``
    reports it (``InputError``) only if it is a KV-shaping field. A ``null`` that
    resolution left in a field kvcheck types as non-nullable (``hicache_ratio`` on a
    server without HiCache) is dropped: the field does not apply, kvcheck's default
    stands.
    """
    from kvcheck.sglang.flags import FlagTable

    table = FlagTable.load(version) if version else FlagTable.load()
    # /server_info holds ServerArgs fields; releases before 0.5.14 parse some into other
    # dests (tensor_parallel_size -> tp_size): accept both names
    dests = (set(table.dests) | set(table.field_renames.values())) - {"help", "config"}
    args: dict[str, Any] = {}
    dropped: list[str] = []
    for key, value in info.items():
        if key not in dests:
            dropped.append(key)
            continue
        if value is None and key in _non_nullable_fields():
            continue
        try:
            args[key] = table.coerce(table.by_field(key) or table.by_dest(key), value, source, origin="json")
        except InputError:
            args[key] = value
    return args, dropped


@functools.lru_cache(maxsize=1)
def _non_nullable_fields() -> frozenset[str]:
    """``kvcheck.sglang.args.ServerArgs`` fields that refuse ``None``."""
    from pydantic import ValidationError

    from kvcheck.sglang.args import ServerArgs

    out = set()
    for name in ServerArgs.model_fields:
        try:
            ServerArgs(**{name: None})  # type: ignore[arg-type]  # probing which fields refuse None
        except ValidationError:
            out.add(name)
    return frozenset(out)


def side_from_snapshot(
    snap: dict[str, Any],
    role: Role,
    *,
    origin: str,
    model_config: Path | None = None,
    draft_model_config: Path | None = None,
    env_file: Path | None = None,
    snapshot_path: str | None = None,
    gpu: str | None = None,
    sglang_version: str | None = None,
    models_dir: Path | None = None,
) -> Side:
    """Build the ``Side`` from a (redacted) snapshot dict; shared by live and offline use.

    The served model's config: ``--model-config``, else its ``model_path`` read where
    every other input reads it (a local directory, ``--models`` / the Hugging Face cache,
    kvcheck's catalog by hub id: ``kvcheck.sources.models.resolve_model_config``).

    ``gpu``: ``--gpu``/``--prefill-gpu``/``--decode-gpu``, as on every other input path.
    SGLang's ``/server_info`` names no GPU model (0.5.23 ``build_server_info``: the resolved
    args, scheduler info, ``version``), so nothing from the server can disagree with it;
    without it the side's GPU is not known (decided over Hopper and Blackwell by the
    pipeline, ``kvcheck.cluster.decide``).

    The side's release is the server's own ``version`` (``/server_info``) when kvcheck
    models it, else ``sglang_version`` (``--sglang-version``), see
    ``kvcheck.sglang.releases.choose_release``; its flag table types the args."""
    from kvcheck.sglang.releases import choose_release
    from kvcheck.sources import build_side
    from kvcheck.sources.files import read_env_file

    info: dict[str, Any] = snap["server_info"]
    reported = info.get("version") if isinstance(info.get("version"), str) else None
    release = choose_release(
        reported,
        "version in /server_info" if snapshot_path is None else "version in the snapshot's server_info",
        sglang_version,
    )
    args, dropped = server_args_from_info(info, origin, release.table)
    env = read_env_file(env_file) if env_file is not None else {}
    model_info = snap.get("model_info") or {}
    model = None
    if model_config is None:
        model = _served_model(args, models_dir)
    if model is None:
        _require_model(args, model_info, origin, model_config, draft_model_config)
    live: dict[str, Any] = {
        "url": snap.get("url"),
        "snapshot": snapshot_path,
        "captured_at": snap.get("captured_at"),
        "version": info.get("version"),
        "server_info_endpoint": snap.get("server_info_endpoint"),
        "server_extras": {k: info[k] for k in SERVER_EXTRA_KEYS if k in info},
        "dropped_keys": len(dropped),
        "model_info": model_info or None,
        "route": snap.get("route"),
        "route_url": snap.get("route_url"),
        "route_error": snap.get("route_error"),
        "env_note": None
        if env_file
        else "/server_info does not report environment variables; pass --prefill-env/--decode-env for SGLANG_*/UCX_* "
        "settings",
        "findings": [],
    }
    side = build_side(
        role,
        args,
        env,
        origin,
        model_config=model_config,
        draft_model_config=draft_model_config,
        live=live,
        release=release,
        gpu=gpu,
        model=model,
    )
    assert side.live is not None  # build_side(live=...) keeps it
    side.live["findings"] = live_findings(side)  # Side copies the dict: set it on the side
    return side


def _served_model(args: dict[str, Any], models_dir: Path | None) -> Any:
    """The served model's ``ModelConfig`` when its ``model_path`` is no local directory but
    a hub id kvcheck finds (the Hugging Face cache, ``--models``, the catalog), as for a file
    or ``-f`` input; None otherwise (a local directory is read by ``build_side``)."""
    mp = args.get("model_path")
    if not isinstance(mp, str) or not mp:
        return None
    try:
        if Path(os.path.expanduser(mp)).exists():
            return None
    except (OSError, ValueError):
        return None
    from kvcheck.sglang.model import parse_model_config
    from kvcheck.sources.models import resolve_model_config

    ms = resolve_model_config(mp, models_dir=models_dir)
    if ms is None:
        return None
    return parse_model_config(ms.raw, source=ms.source, override_args=args.get("json_model_override_args"))


def _require_model(
    args: dict[str, Any],
    model_info: dict[str, Any],
    origin: str,
    model_config: Path | None,
    draft_model_config: Path | None,
) -> None:
    """Say clearly when the served model's config.json cannot be read from here."""
    if model_config is not None:
        return
    from kvcheck.sources.limits import clip

    mp = args.get("model_path")
    try:
        if mp and Path(os.path.expanduser(str(mp))).exists():
            return
    except (OSError, ValueError):  # a name too long for the file system, a NUL
        pass
    arch = clip(", ".join(str(a) for a in model_info.get("architectures") or []) or "unknown architecture")
    raise InputError(
        f"the server serves model_path {clip(repr(mp))} ({arch}), which is not readable from where kvcheck runs, so "
        "there is no "
        "model config.json to read (not a local directory, not in a Hugging Face cache or --models DIR, not in "
        "kvcheck's catalog): pass --model-config FILE (or --prefill-model-config/--decode-model-config) with "
        "that "
        "model's config.json, or mount the model at the same path",
        source=origin,
        field="--model-config",
    )


__all__ = [
    "API_KEY_ENV",
    "LiveOptions",
    "LiveSourceError",
    "REDACTED",
    "capture",
    "expected_route",
    "live_findings",
    "load_live_side",
    "load_snapshot_side",
    "server_args_from_info",
    "write_snapshot",
]
