"""The HTTP side of live sources (``kvcheck.sources.live``): GET only, one overall deadline
per live source shared by all its requests, a watchdog for requests stuck in the HTTP
library, bodies streamed under the size limits (``kvcheck.sources.limits``), retries of
connection errors and 502/503/504 until the deadline, redirects never followed; and the
three reads: ``/server_info``, ``/model_info`` and the prefill bootstrap server's
``/route``. Exit statuses: ``LiveSourceError`` (3) or ``InputError`` (2), as
``kvcheck.sources.live`` describes.
"""

from __future__ import annotations

import json
import os
import re
import time
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlsplit

import httpx

from kvcheck.errors import InputError, UnreachableError
from kvcheck.sources.live_strict import _header_text
from kvcheck.sources.redact import redact_url, scrub

API_KEY_ENV = "KVCHECK_API_KEY"
DEFAULT_CONNECT_TIMEOUT = 3.0  # seconds
DEFAULT_DEADLINE = 10.0  # seconds, per live source
ROUTE_PATH = "/route"
ROUTE_QUERY = {"prefill_dp_rank": "-1", "prefill_cp_rank": "-1", "target_tp_rank": "-1", "target_pp_rank": "-1"}
RETRY_STATUSES = (502, 503, 504)


# /model_info keys kept on Side.live (the rest is serving detail).
MODEL_INFO_KEYS = (
    "model_path",
    "served_model_name",
    "architectures",
    "model_type",
    "disaggregation_mode",
    "is_generation",
    "weight_version",
)
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
    def from_kwargs(cls, **kw: Any) -> LiveOptions:
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
            f"could not read the live source {shown} within the {deadline.seconds:g} s deadline: still {doing} when "
            "it passed "
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
        raise InputError(
            "expected http://HOST:PORT or https://HOST:PORT (the server's HTTP port)",
            source=redact_url(spec),
            field=field,
        )
    path = parts.path.rstrip("/")
    for suffix in ("/server_info", "/get_server_info"):
        if path.endswith(suffix):
            path = path[: -len(suffix)]
    return f"{parts.scheme}://{parts.netloc}{path}"


class _Client:
    """GET-only JSON client for one base URL under one deadline."""

    def __init__(
        self,
        base: str,
        opts: LiveOptions,
        deadline: _Deadline,
        *,
        send_auth: bool,
        role_hint: str,
        state: dict[str, str] | None = None,
    ):
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
        self.http = httpx.Client(
            headers=headers, verify=opts.verify, follow_redirects=False, transport=opts.transport, trust_env=True
        )

    def close(self) -> None:
        self.http.close()

    def __enter__(self) -> _Client:
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
                f"could not read the live source within the {self.deadline.seconds:g} s deadline: still {doing} GET "
                f"{shown} when it passed "
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
            raise LiveSourceError(
                f"could not read the live source: GET {shown} answered with content-encoding {encoding!r}, which "
                "kvcheck did not ask for",
                url=self.shown,
            )
        raw = 0
        out = bytearray()

        def too_big(what: str, limit: int) -> LiveSourceError:
            return LiveSourceError(
                f"could not read the live source: GET {shown} answered more than {limit} bytes {what}; SGLang's "
                "answers are tens of KiB, so this is not one",
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
                        raise LiveSourceError(
                            f"could not read the live source: GET {shown} answered a corrupt {encoding} body ({exc})",
                            url=self.shown,
                        ) from None
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

    def get_json(
        self, path: str, *, params: dict[str, str] | None = None, allow_404: bool = False, what: str = ""
    ) -> Any:
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
                        raise InputError(
                            f"{status} {_header_text(resp.reason_phrase, self.secrets)} for GET {shown}: {hint}",
                            source=self.shown,
                        )
                    if status not in RETRY_STATUSES:
                        raise LiveSourceError(
                            f"could not read the live source: GET {shown} answered {status} "
                            f"{_header_text(resp.reason_phrase, self.secrets)}{self._hint(status)}",
                            url=self.shown,
                        )
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
                f"after {self.deadline.seconds:g} s ({attempts} attempts); every prefill rank registers once it has "
                "started "
                "(raise --deadline to wait longer)"
            )
        where = "the prefill's bootstrap server" if what == "route" else f"the {self.role_hint} server"
        hint = " (set --bootstrap URL if it is reachable at another address)" if what == "route" else ""
        return (
            f"could not reach {where} at {shown} within the {self.deadline.seconds:g} s deadline ({attempts} "
            f"attempts): {last}{hint}"
        )

    def _decode(self, body: bytes, ctype: str, shown: str) -> Any:
        """Parse a JSON body; malformed, invalid UTF-8, or nested past ``MAX_DEPTH``
        -> ``LiveSourceError`` (exit 3) naming the URL; the body is never echoed."""
        from kvcheck.sources.limits import MAX_DEPTH, json_depth_ok

        ctype = _header_text(ctype, self.secrets)

        def bad(why: str) -> LiveSourceError:
            return LiveSourceError(
                f"could not read the live source: GET {shown} answered 200 with malformed JSON ({ctype}, {len(body)} "
                f"bytes): {why}",
                url=self.shown,
            )

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
                f"could not read the live source: GET {client.shown}{path} is not SGLang's server info (a JSON "
                f"{kind} without model_path/version)",
                url=client.shown,
            )
        return data, path
    raise LiveSourceError(
        f"could not read the live source: {client.shown} has neither /server_info nor /get_server_info (is this "
        "SGLang's HTTP port?)",
        url=client.shown,
    )


def fetch_model_info(client: _Client) -> dict[str, Any] | None:
    """``/model_info`` (else ``/get_model_info``) trimmed to ``MODEL_INFO_KEYS``; None if absent."""
    for path in ("/model_info", "/get_model_info"):
        data = client.get_json(path, allow_404=True, what="model_info")
        if isinstance(data, dict):
            return {k: data.get(k) for k in MODEL_INFO_KEYS if k in data}
    return None


def fetch_route(
    base: str, opts: LiveOptions, deadline: _Deadline, state: dict[str, str] | None = None
) -> dict[str, Any]:
    """The bootstrap server's ``GET /route`` reply for all ranks (-1s): what a decode
    reads first. Retries 503 ("not fully registered") until ``deadline``.

    Raises ``LiveSourceError`` (exit 3) when unreachable, still 503, or not a JSON object.
    """
    with _Client(base, opts, deadline, send_auth=False, role_hint="bootstrap", state=state) as client:
        data = client.get_json(ROUTE_PATH, params=ROUTE_QUERY, what="route")
    if not isinstance(data, dict) or "page_size" not in data:
        raise LiveSourceError(
            f"could not read the live source: GET {redact_url(base)}{ROUTE_PATH} is not a bootstrap server's prefill "
            "info",
            url=redact_url(base),
        )
    return data
