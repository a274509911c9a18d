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
"""

from __future__ import annotations

import datetime as _dt
import functools
import json
import os
import re
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any
from urllib.parse import urlsplit

import httpx

from kvcheck.errors import InputError, UnreachableError
from kvcheck.sides import Role, Side
from kvcheck.sources.live_strict import _header_text, _mistyped_fields  # noqa: F401
from kvcheck.sources.redact import REDACTED, redact, redact_url, scrub

API_KEY_ENV = "KVCHECK_API_KEY"
DEFAULT_CONNECT_TIMEOUT = 3.0  # seconds
DEFAULT_DEADLINE = 10.0  # seconds, per live source
MODELED_VERSION = "0.5.23"
SNAPSHOT_FORMAT = 1
ROUTE_PATH = "/route"
ROUTE_QUERY = {"prefill_dp_rank": "-1", "prefill_cp_rank": "-1", "target_tp_rank": "-1", "target_pp_rank": "-1"}
RETRY_STATUSES = (502, 503, 504)
# /model_info keys kept on Side.live (the rest is serving detail).
MODEL_INFO_KEYS = ("model_path", "served_model_name", "architectures", "model_type", "disaggregation_mode", "is_generation", "weight_version")
# non-dest /server_info keys kvcheck keeps (on Side.live["server_extras"]) because they
# change what the prefill registers with the bootstrap server.
SERVER_EXTRA_KEYS = ("enable_cp_tp_group_sharing", "version", "frontend")


NOT_FOUND = object()  # what ``_Client.get_json`` returns for an allowed 404 (a JSON ``null`` is None)


class LiveSourceError(UnreachableError):
    """A live source (server or bootstrap server) gave no usable answer in time: exit 3.

    Covers unreachable, timed out, still 5xx/503 at the deadline, malformed or foreign
    JSON. ``url`` is the redacted address asked.
    """

    def __init__(self, message: str, *, url: str):
        self.url = url
        super().__init__(message, source=url)


@dataclass
class LiveOptions:
    """How to talk to live servers.

    ``api_key``: bearer token for the SGLang HTTP server (``--api-key``; else the
    ``KVCHECK_API_KEY`` environment variable); never sent to the bootstrap server, which
    has no auth. ``bootstrap``: the prefill's bootstrap server URL (``--bootstrap``),
    else derived. ``connect_timeout``/``deadline``: seconds. ``verify``: TLS verification
    for https (``True``, ``False`` or a CA bundle path). ``transport``: an
    ``httpx.BaseTransport`` (tests).
    """

    api_key: str | None = None
    bootstrap: str | None = None
    connect_timeout: float = DEFAULT_CONNECT_TIMEOUT
    deadline: float = DEFAULT_DEADLINE
    verify: bool | str = True
    transport: httpx.BaseTransport | None = None

    @classmethod
    def from_kwargs(cls, **kw: Any) -> "LiveOptions":
        """Build from ``load_side``'s ``**live_options`` (unknown keys are an error;
        ``None`` values mean the default). The API key falls back to ``KVCHECK_API_KEY``."""
        known = {k: v for k, v in kw.items() if v is not None}
        unknown = set(known) - set(cls.__dataclass_fields__)
        if unknown:
            raise TypeError(f"unknown live options: {', '.join(sorted(unknown))}")
        opts = cls(**known)
        if not opts.api_key:
            opts.api_key = os.environ.get(API_KEY_ENV) or None
        if opts.connect_timeout <= 0 or opts.deadline <= 0:
            raise InputError("--connect-timeout and --deadline must be positive numbers of seconds", field="--deadline")
        return opts


class _Deadline:
    """One overall deadline for a live source (monotonic clock), shared by every request
    to it (its ``/server_info``, ``/model_info`` and its bootstrap server's ``/route``)."""

    def __init__(self, seconds: float):
        self.seconds = seconds
        self.end = time.monotonic() + seconds

    def left(self) -> float:
        """Seconds left (0 when past)."""
        return max(0.0, self.end - time.monotonic())

    def expired(self) -> bool:
        """Whether the deadline has passed."""
        return time.monotonic() >= self.end


# Grace (seconds) past the deadline before the watchdog abandons a request that is stuck
# inside the HTTP library (headers trickling one byte at a time): the bound on our code.
WATCHDOG_GRACE = 0.5


def _with_watchdog(fn: Any, deadline: _Deadline, shown: str, state: dict[str, str]) -> Any:
    """Run ``fn()`` in a worker thread and give up at ``deadline`` (+ ``WATCHDOG_GRACE``)
    whatever the worker is blocked on: slow or trickling headers, a TLS handshake, a
    resolver. ``state["doing"]`` says what was in progress, for the message. The worker
    is a daemon thread; it stops at its next deadline check (``state["cancelled"]``).

    Raises ``LiveSourceError`` (exit 3) at the cutoff, else whatever ``fn`` raises.
    """
    import threading

    box: dict[str, Any] = {}

    def work() -> None:
        try:
            box["value"] = fn()
        except BaseException as exc:  # handed to the caller's thread
            box["error"] = exc

    worker = threading.Thread(target=work, name="kvcheck-live", daemon=True)
    worker.start()
    worker.join(deadline.left() + WATCHDOG_GRACE)
    if worker.is_alive():
        state["cancelled"] = "1"
        doing = state.get("doing") or "reading"
        raise LiveSourceError(
            f"could not read the live source {shown} within the {deadline.seconds:g} s deadline: still {doing} when it passed "
            "(a server that stalls or sends its answer too slowly); raise --deadline if it is only slow",
            url=shown,
        )
    if "error" in box:
        raise box["error"]
    return box.get("value")


def normalize_url(spec: str, *, field: str = "--prefill/--decode") -> str:
    """``http(s)://host:port[/prefix]`` -> the base URL without a trailing slash.

    Raises ``InputError`` for other schemes or a URL without a host.
    """
    try:
        parts = urlsplit(spec.strip())
        _ = parts.port  # validates the port
    except ValueError as exc:
        raise InputError(f"not a valid URL: {exc}", source=redact_url(spec), field=field) from None
    if parts.scheme not in ("http", "https") or not parts.hostname:
        raise InputError("expected http://HOST:PORT or https://HOST:PORT (the server's HTTP port)", source=redact_url(spec), field=field)
    path = parts.path.rstrip("/")
    for suffix in ("/server_info", "/get_server_info"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    return f"{parts.scheme}://{parts.netloc}{path}"


class _Client:
    """GET-only JSON client for one base URL under one deadline."""

    def __init__(self, base: str, opts: LiveOptions, deadline: _Deadline, *, send_auth: bool, role_hint: str, state: dict[str, str] | None = None):
        self.state = state if state is not None else {}
        self.base = base
        self.shown = redact_url(base)
        self.opts = opts
        self.deadline = deadline
        self.role_hint = role_hint
        headers = {"Accept": "application/json", "Accept-Encoding": "gzip, deflate", "User-Agent": "kvcheck"}
        if send_auth and opts.api_key:
            headers["Authorization"] = f"Bearer {opts.api_key}"
        self.secrets = [opts.api_key] if opts.api_key else []
        self.http = httpx.Client(headers=headers, verify=opts.verify, follow_redirects=False, transport=opts.transport, trust_env=True)

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> "_Client":
        return self

    def __exit__(self, *exc: Any) -> None:
        self.close()

    def _timeout(self) -> httpx.Timeout:
        left = max(0.05, self.deadline.left())
        return httpx.Timeout(connect=min(self.opts.connect_timeout, left), read=left, write=left, pool=left)

    def _check(self, shown: str, doing: str) -> None:
        """Stop between reads once the deadline passed (or the watchdog gave up)."""
        self.state["doing"] = f"{doing} GET {shown}"
        if self.deadline.expired() or self.state.get("cancelled"):
            raise LiveSourceError(
                f"could not read the live source within the {self.deadline.seconds:g} s deadline: still {doing} GET {shown} when it passed "
                "(a server that stalls or sends its answer too slowly); raise --deadline if it is only slow",
                url=self.shown,
            )

    def _read_body(self, resp: httpx.Response, shown: str) -> bytes:
        """The body, decoded from gzip/deflate, read chunk by chunk under the deadline
        and the size limits (``MAX_BODY_BYTES`` on the wire, ``MAX_INFLATED_BYTES``
        after inflating, inflated incrementally so a bomb never fills memory)."""
        import zlib

        from kvcheck.sources.limits import MAX_BODY_BYTES, MAX_INFLATED_BYTES

        encoding = resp.headers.get("content-encoding", "identity").strip().lower()
        if encoding in ("", "identity"):
            inflater = None
        elif encoding in ("gzip", "x-gzip", "deflate"):
            inflater = zlib.decompressobj(zlib.MAX_WBITS | 32) if encoding != "deflate" else zlib.decompressobj()
        else:
            raise LiveSourceError(f"could not read the live source: GET {shown} answered with content-encoding {encoding!r}, which kvcheck did not ask for", url=self.shown)
        raw = 0
        out = bytearray()

        def too_big(what: str, limit: int) -> LiveSourceError:
            return LiveSourceError(
                f"could not read the live source: GET {shown} answered more than {limit} bytes {what}; SGLang's answers are tens of KiB, so this is not one",
                url=self.shown,
            )

        def inflate(data: bytes) -> None:
            nonlocal inflater
            assert inflater is not None
            while data:
                room = MAX_INFLATED_BYTES + 1 - len(out)
                try:
                    piece = inflater.decompress(data, room)
                except zlib.error as exc:
                    if encoding == "deflate" and not out and raw <= len(data):  # raw deflate without the zlib header
                        inflater = zlib.decompressobj(-zlib.MAX_WBITS)
                        piece = inflater.decompress(data, room)
                    else:
                        raise LiveSourceError(f"could not read the live source: GET {shown} answered a corrupt {encoding} body ({exc})", url=self.shown) from None
                out.extend(piece)
                if len(out) > MAX_INFLATED_BYTES:
                    raise too_big("once inflated", MAX_INFLATED_BYTES)
                data = inflater.unconsumed_tail

        self._check(shown, "receiving the body of")
        for chunk in _raw_chunks(resp, None):  # each network read as it arrives (<= 64 KiB)
            self._check(shown, "receiving the body of")
            raw += len(chunk)
            if raw > MAX_BODY_BYTES:
                raise too_big("on the wire", MAX_BODY_BYTES)
            if inflater is None:
                out.extend(chunk)
            else:
                inflate(chunk)
        return bytes(out)

    def get_json(self, path: str, *, params: dict[str, str] | None = None, allow_404: bool = False, what: str = "") -> Any:
        """GET ``path``; the decoded JSON, or ``NOT_FOUND`` on 404 when ``allow_404``.

        Streams the response under the source's one deadline (checked per chunk; a
        watchdog in ``capture`` cuts requests stuck before the first chunk) and the
        size limits. Retries connection errors and 502/503/504 until the deadline; never
        follows a redirect. Raises ``LiveSourceError`` (exit 3) or, for 401/403,
        ``InputError`` (exit 2). Error bodies are never echoed.
        """
        url = self.base + path
        shown = redact_url(self.shown + path)
        attempts, pause = 0, 0.2
        last: str = ""
        while True:
            attempts += 1
            self._check(shown, "connecting for")
            self.state["doing"] = f"connecting or waiting for the answer headers of GET {shown}"
            try:
                with self.http.stream("GET", url, params=params, timeout=self._timeout()) as resp:
                    status = resp.status_code
                    if status == 200:
                        body = self._read_body(resp, shown)
                        return self._decode(body, resp.headers.get("content-type", "no content-type"), shown)
                    if status == 404 and allow_404:
                        return NOT_FOUND
                    if status in (401, 403):
                        hint = (
                            f"no API key was given: pass --api-key or set {API_KEY_ENV}"
                            if not self.opts.api_key
                            else f"the API key from --api-key/{API_KEY_ENV} was refused"
                        )
                        raise InputError(f"{status} {_header_text(resp.reason_phrase, self.secrets)} for GET {shown}: {hint}", source=self.shown)
                    if status not in RETRY_STATUSES:
                        raise LiveSourceError(f"could not read the live source: GET {shown} answered {status} {_header_text(resp.reason_phrase, self.secrets)}{self._hint(status)}", url=self.shown)
                    last = f"{status} {_header_text(resp.reason_phrase, self.secrets)}" + self._known_body(resp, shown)
            except httpx.TimeoutException as exc:
                kind = "read" if isinstance(exc, httpx.ReadTimeout) else "connect"
                last = f"{kind} timeout ({type(exc).__name__})"
            except (httpx.TransportError, OSError) as exc:
                last = f"{type(exc).__name__}: {scrub(str(exc), self.secrets) or 'connection failed'}"
            left = self.deadline.left()
            if left <= 0.05:
                raise LiveSourceError(self._gave_up(shown, last, attempts, what), url=self.shown)
            time.sleep(min(pause, max(0.0, left - 0.05)))
            pause = min(1.0, pause * 2)

    _REGISTERED = re.compile(r"not fully registered yet \((\d+) workers? registered\)")

    def _known_body(self, resp: httpx.Response, shown: str) -> str:
        """What a 5xx body says, only when it is the bootstrap server's own "not fully
        registered yet (N workers registered)" text (``_handle_route_get`` of SGLang
        0.5.23's bootstrap server, ``disaggregation/common/conn.py``): the count. Any other body is never
        shown (it could echo anything); at most 4 KiB of it is read."""
        data = b""
        try:
            for chunk in _raw_chunks(resp, None):
                data += chunk
                if len(data) >= 4096 or self.deadline.expired():
                    break
        except (httpx.TransportError, OSError):
            return ""
        if resp.headers.get("content-encoding", "identity") not in ("", "identity"):
            return ""
        m = self._REGISTERED.search(data.decode("utf-8", "replace"))
        return f": prefill not fully registered yet ({m.group(1)} workers registered)" if m else ""

    def _hint(self, status: int) -> str:
        if 300 <= status < 400:
            return " (a redirect: kvcheck does not follow redirects; give the final URL)"
        if status == 404:
            return f" (is {self.shown} SGLang's HTTP port?)"
        return ""

    def _gave_up(self, shown: str, last: str, attempts: int, what: str) -> str:
        if what == "route" and last.startswith("503"):
            return (
                f"the prefill is not fully registered with its bootstrap server: GET {shown} still answered {last} "
                f"after {self.deadline.seconds:g} s ({attempts} attempts); every prefill rank registers once it has started "
                "(raise --deadline to wait longer)"
            )
        where = "the prefill's bootstrap server" if what == "route" else f"the {self.role_hint} server"
        hint = " (set --bootstrap URL if it is reachable at another address)" if what == "route" else ""
        return f"could not reach {where} at {shown} within the {self.deadline.seconds:g} s deadline ({attempts} attempts): {last}{hint}"

    def _decode(self, body: bytes, ctype: str, shown: str) -> Any:
        """Parse a JSON body; malformed, invalid UTF-8, or nested past ``MAX_DEPTH``
        -> ``LiveSourceError`` (exit 3) naming the URL; the body is never echoed."""
        from kvcheck.sources.limits import MAX_DEPTH, json_depth_ok

        ctype = _header_text(ctype, self.secrets)

        def bad(why: str) -> LiveSourceError:
            return LiveSourceError(f"could not read the live source: GET {shown} answered 200 with malformed JSON ({ctype}, {len(body)} bytes): {why}", url=self.shown)

        try:
            text = body.decode("utf-8")
        except UnicodeDecodeError as exc:
            raise bad(f"invalid UTF-8 at byte {exc.start}") from None
        from kvcheck.sources.limits import StrictJSONError, strict_json_loads

        self._check(shown, "parsing the answer of")
        try:
            data = strict_json_loads(text)  # no NaN/Infinity, duplicate keys, lone surrogates
        except json.JSONDecodeError as exc:
            raise bad(f"at line {exc.lineno}, column {exc.colno}: {exc.msg}") from None
        except StrictJSONError as exc:
            raise bad(f"not strict JSON: {exc}") from None
        except (RecursionError, ValueError) as exc:
            raise bad(type(exc).__name__) from None
        if not json_depth_ok(data):
            raise bad(f"nested deeper than {MAX_DEPTH} levels")
        self._check(shown, "parsing the answer of")
        return data


def _raw_chunks(resp: httpx.Response, size: int | None) -> Any:
    """The raw body in chunks; a response whose body the transport already read (an
    ``httpx.MockTransport`` in tests) gives it in one piece."""
    if resp.is_stream_consumed:
        yield resp.content
        return
    yield from resp.iter_raw(size)


def _base_host(base: str) -> str:
    host = urlsplit(base).hostname or "localhost"
    return f"[{host}]" if ":" in host else host


def bootstrap_url_for(base: str, server_info: dict[str, Any], override: str | None = None) -> str:
    """The prefill's bootstrap server: ``override`` (``--bootstrap``) when given, else
    ``http://<host of base>:<disaggregation_bootstrap_port>`` (default 8998), as SGLang
    serves it (plain HTTP, no auth)."""
    if override:
        return normalize_url(override, field="--bootstrap")
    port = server_info.get("disaggregation_bootstrap_port") or 8998
    return f"http://{_base_host(base)}:{int(port)}"


def fetch_server_info(client: _Client) -> tuple[dict[str, Any], str]:
    """``(server_info, endpoint)`` from ``/server_info``, else ``/get_server_info``.

    Raises ``LiveSourceError`` when neither exists or the reply is not SGLang's.
    """
    for path in ("/server_info", "/get_server_info"):
        data = client.get_json(path, allow_404=True, what="server_info")
        if data is NOT_FOUND:
            continue
        if not isinstance(data, dict) or not ("model_path" in data or "version" in data):
            kind = type(data).__name__
            raise LiveSourceError(
                f"could not read the live source: GET {client.shown}{path} is not SGLang's server info (a JSON {kind} without model_path/version)",
                url=client.shown,
            )
        return data, path
    raise LiveSourceError(f"could not read the live source: {client.shown} has neither /server_info nor /get_server_info (is this SGLang's HTTP port?)", url=client.shown)


def fetch_model_info(client: _Client) -> dict[str, Any] | None:
    """``/model_info`` (else ``/get_model_info``) trimmed to ``MODEL_INFO_KEYS``; None if absent."""
    for path in ("/model_info", "/get_model_info"):
        data = client.get_json(path, allow_404=True, what="model_info")
        if isinstance(data, dict):
            return {k: data.get(k) for k in MODEL_INFO_KEYS if k in data}
    return None


def fetch_route(base: str, opts: LiveOptions, deadline: _Deadline, state: dict[str, str] | None = None) -> dict[str, Any]:
    """The bootstrap server's ``GET /route`` reply for all ranks (-1s): what a decode
    reads first. Retries 503 ("not fully registered") until ``deadline``.

    Raises ``LiveSourceError`` (exit 3) when unreachable, still 503, or not a JSON object.
    """
    with _Client(base, opts, deadline, send_auth=False, role_hint="bootstrap", state=state) as client:
        data = client.get_json(ROUTE_PATH, params=ROUTE_QUERY, what="route")
    if not isinstance(data, dict) or "page_size" not in data:
        raise LiveSourceError(f"could not read the live source: GET {redact_url(base)}{ROUTE_PATH} is not a bootstrap server's prefill info", url=redact_url(base))
    return data


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
    return _with_watchdog(lambda: _capture(base, role, opts, deadline, state, tolerate_route), deadline, redact_url(base), state)


def _capture(base: str, role: Role | None, opts: LiveOptions, deadline: _Deadline, state: dict[str, str], tolerate_route: bool) -> dict[str, Any]:
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
        "captured_at": _dt.datetime.now(_dt.timezone.utc).isoformat(timespec="seconds"),
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
    sglang_version: str | None = None,
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
            f"could not read the live source: GET {snap['url']}{snap.get('server_info_endpoint') or '/server_info'} answered "
            f"{', '.join(bad)} with a value of a JSON type that SGLang's flag cannot hold (malformed server info)",
            url=snap["url"],
        )
    return side_from_snapshot(snap, role, origin=snap["url"], model_config=model_config, draft_model_config=draft_model_config, env_file=env_file, sglang_version=sglang_version)


def load_snapshot_side(
    path: Path,
    data: dict[str, Any],
    role: Role,
    *,
    model_config: Path | None = None,
    draft_model_config: Path | None = None,
    env_file: Path | None = None,
    sglang_version: str | None = None,
) -> Side:
    """A ``Side`` from a saved ``kvcheck snapshot`` file (already parsed: ``data``), offline.

    Raises ``InputError`` (exit 2) when ``data`` is not a snapshot kvcheck can read.
    """
    info = data.get("server_info")
    if not isinstance(info, dict):
        raise InputError("a kvcheck snapshot needs a JSON object under 'server_info'", source=str(path), field="server_info")
    for key in ("route", "model_info"):
        if data.get(key) is not None and not isinstance(data[key], dict):
            raise InputError(f"'{key}' must be a JSON object or null", source=str(path), field=key)
    snap = redact(data)
    snap.setdefault("url", None)
    return side_from_snapshot(snap, role, origin=str(path), model_config=model_config, draft_model_config=draft_model_config, env_file=env_file, snapshot_path=str(path), sglang_version=sglang_version)


def server_args_from_info(info: dict[str, Any], source: str, version: str | None = None) -> tuple[dict[str, Any], list[str]]:
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
            ServerArgs(**{name: None})
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
    sglang_version: str | None = None,
) -> Side:
    """Build the ``Side`` from a (redacted) snapshot dict; shared by live and offline use.

    The side's release is the server's own ``version`` (``/server_info``) when kvcheck
    models it, else ``sglang_version`` (``--sglang-version``), see
    ``kvcheck.sglang.releases.choose_release``; its flag table types the args."""
    from kvcheck.sglang.releases import choose_release
    from kvcheck.sources import build_side
    from kvcheck.sources.files import read_env_file

    info: dict[str, Any] = snap["server_info"]
    reported = info.get("version") if isinstance(info.get("version"), str) else None
    release = choose_release(reported, "version in /server_info" if snapshot_path is None else "version in the snapshot's server_info", sglang_version)
    args, dropped = server_args_from_info(info, origin, release.table)
    env = read_env_file(env_file) if env_file is not None else {}
    model_info = snap.get("model_info") or {}
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
        "env_note": None if env_file else "/server_info does not report environment variables; pass --prefill-env/--decode-env for SGLANG_*/UCX_* settings",
        "findings": [],
    }
    side = build_side(role, args, env, origin, model_config=model_config, draft_model_config=draft_model_config, live=live, release=release)
    side.live["findings"] = live_findings(side)  # Side copies the dict: set it on the side
    return side


def _require_model(args: dict[str, Any], model_info: dict[str, Any], origin: str, model_config: Path | None, draft_model_config: Path | None) -> None:
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
        f"the server serves model_path {clip(repr(mp))} ({arch}), which is not readable from where kvcheck runs, so there is no "
        "model config.json to read: pass --model-config FILE (or --prefill-model-config/--decode-model-config) with that "
        "model's config.json, or mount the model at the same path",
        source=origin,
        field="--model-config",
    )


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
    * ``live-version`` (warning): the server is not SGLang 0.5.23;
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
        out.append(_finding(
            "live-role", "warning",
            f"the server at {where} reports disaggregation_mode={mode} but was given as --{side.role}",
            f"Give the {side.role} server's URL to --{side.role} (were --prefill and --decode swapped?), or start that server with --disaggregation-mode {side.role}.",
        ))
    version = live.get("version")
    if version and side.sglang_version and version != side.sglang_version:
        out.append(_finding(
            "live-version", "warning",
            f"the server at {where} runs SGLang {version}; kvcheck judged it as SGLang {side.sglang_version} ({side.version_source}), so its verdict may not hold",
            f"Drop --sglang-version for this side, or check this pair on a staging deployment running SGLang {side.sglang_version}.",
        ))
    archs = (live.get("model_info") or {}).get("architectures") or []
    if archs and side.model.architecture not in archs:
        out.append(_finding(
            "live-model", "warning",
            f"the server at {where} serves {', '.join(archs)} but the model config kvcheck read ({side.model.source or 'model config'}) is {side.model.architecture}",
            "Pass the served model's own config.json with --model-config.",
        ))
    if side.role == "prefill":
        route = live.get("route")
        if route is None:
            if live.get("route_error") and mode == "prefill":
                out.append(_finding(
                    "live-route", "warning",
                    f"no bootstrap /route reply was captured for {where}: {live['route_error']}",
                    "Take the snapshot again once every prefill rank has registered, or run preflight against the live prefill.",
                ))
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
                        what = f"the bootstrap server at {live.get('route_url')} was registered by a prefill with HTTP port {got}, not by this server (port {want}): it belongs to another prefill"
                    else:
                        what = (
                            f"the bootstrap server at {live.get('route_url')} reports {key}={got_r}, /server_info of {where} says {want_r}; "
                            "kvcheck's plan used /server_info, the decode will use the bootstrap server's value"
                        )
                    out.append(_finding("live-route", "error", what, ROUTE_FIX))
    return out


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
