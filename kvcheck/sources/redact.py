"""Secrets out of everything kvcheck prints or saves from a live server.

SGLang's ``GET /server_info`` returns every resolved server arg, secrets included
(``api_key``, ``admin_api_key``, ``ssl_keyfile_password``; in 0.5.23 ``launch_command``
may echo ``--api-key VALUE`` too). kvcheck redacts:

* by key: a mapping key naming a secret (see ``is_secret_key``), at any depth;
* by value: every string value of such a key (and the bearer token kvcheck was given)
  is also scrubbed wherever it appears inside any other string (``launch_command``,
  error text), as is the value after a secret flag in a command line
  (``--api-key X`` / ``--api-key=X``);
* in URLs: the password of ``user:password@host`` and secret-named query parameters.

The placeholder is ``REDACTED`` (``"<redacted>"``, a string, so a redacted snapshot stays
valid input). ``None``/empty values are kept, so "no api key set" stays visible.
"""

from __future__ import annotations

import re
from typing import Any, Iterable
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "<redacted>"

# Whole words (of a snake_case, kebab-case or camelCase name) that mark a secret
# anywhere in the name, and words that do so as the name's last word only. Word-wise on
# purpose: ``max_total_tokens``, ``tokenizer_path``, ``speculative_token_map``,
# ``bucket_time_to_first_token`` (a list of floats) and ``ssl_keyfile`` are not secrets.
SECRET_WORDS = frozenset({"password", "passwd", "passphrase", "secret", "secrets", "apikey", "credential", "credentials"})
SECRET_LAST_WORDS = frozenset({"token", "key", "auth", "authorization", "cookie"})
# Always secret, whatever the words say (the ones SGLang 0.5.23 has).
SECRET_KEYS = frozenset({"api_key", "admin_api_key", "ssl_keyfile_password", "watermark_key", "watermark_key_b"})
# Values too short to scrub inside other strings without mangling them.
_MIN_SCRUB_LEN = 4

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def name_words(name: str) -> list[str]:
    """``"adminApiKey"`` / ``"admin-api-key"`` / ``"admin_api_key"`` -> ``["admin", "api", "key"]``."""
    return [w.lower() for w in _WORD_SPLIT.split(name.lstrip("-")) if w]


def is_secret_key(name: str) -> bool:
    """Whether a field (or flag) name holds a secret: one of ``SECRET_KEYS``, a name
    with a word in ``SECRET_WORDS`` (``db_password``, ``client_secret``) or ending in a
    word of ``SECRET_LAST_WORDS`` (``hf_token``, ``api_key``). Not ``max_total_tokens``,
    ``speculative_token_map`` or ``ssl_keyfile``."""
    if not isinstance(name, str):
        return False
    if name.lstrip("-").replace("-", "_").lower() in SECRET_KEYS:
        return True
    words = name_words(name)
    return bool(words) and (words[-1] in SECRET_LAST_WORDS or any(w in SECRET_WORDS for w in words))


def _is_secret_item(key: Any, value: Any) -> bool:
    """A secret-named key holding a value worth hiding: a non-empty string, or any
    non-null scalar under one of ``SECRET_KEYS`` (numbers under ``*_token`` are counts)."""
    if not is_secret_key(key) or value is None or value == "" or isinstance(value, (dict, list, tuple, bool)):
        return False
    return isinstance(value, str) or str(key).lstrip("-").replace("-", "_").lower() in SECRET_KEYS


def collect_secrets(obj: Any, extra: Iterable[str | None] = ()) -> set[str]:
    """Every non-empty string (or number) stored under a secret key in ``obj`` (any
    depth), plus the ``extra`` values (e.g. the bearer token): what ``scrub`` removes."""
    found: set[str] = {s for s in extra if isinstance(s, str) and s}

    def walk(node: Any) -> None:
        if isinstance(node, dict):
            for k, v in node.items():
                if _is_secret_item(k, v):
                    found.add(str(v))
                walk(v)
        elif isinstance(node, (list, tuple)):
            for v in node:
                walk(v)

    walk(obj)
    found.discard(REDACTED)
    return found


_SECRET_FLAG = re.compile(r"(--?[A-Za-z0-9][A-Za-z0-9_-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|\S+)")


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret value replaced, and the value after a secret-named
    flag (``--api-key X``, ``--hf-token=X``) replaced, and URL passwords removed."""
    if not isinstance(text, str) or not text:
        return text
    for s in sorted((s for s in secrets if s and len(s) >= _MIN_SCRUB_LEN), key=len, reverse=True):
        text = text.replace(s, REDACTED)

    def flag_value(m: re.Match) -> str:
        return f"{m.group(1)}{m.group(2)}{REDACTED}" if is_secret_key(m.group(1)) and m.group(3) != REDACTED else m.group(0)

    text = _SECRET_FLAG.sub(flag_value, text)
    return re.sub(r"(?<=://)([^/@\s:]+):([^/@\s]+)@", lambda m: f"{m.group(1)}:{REDACTED}@", text)


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A deep copy of ``obj`` (dicts, lists, scalars from JSON) with secret-keyed values
    replaced by ``REDACTED`` (``None`` and ``""`` kept, so "unset" stays visible) and every
    string scrubbed of ``secrets`` plus the secrets found in ``obj`` itself."""
    known = collect_secrets(obj, secrets)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if _is_secret_item(k, v):
                    out[k] = REDACTED
                else:
                    out[k] = walk(v)
            return out
        if isinstance(node, (list, tuple)):
            return [walk(v) for v in node]
        if isinstance(node, str):
            return scrub(node, known)
        return node

    return walk(obj)


def redact_url(url: str) -> str:
    """``url`` without a userinfo password and with secret-named query values redacted."""
    try:
        parts = urlsplit(url)
    except ValueError:
        return scrub(url)
    netloc = parts.netloc
    if "@" in netloc:
        userinfo, _, hostport = netloc.rpartition("@")
        user = userinfo.split(":", 1)[0]
        netloc = f"{user}:{REDACTED}@{hostport}" if ":" in userinfo else f"{user}@{hostport}"
    query = parts.query
    if query:
        pairs = parse_qsl(query, keep_blank_values=True)
        query = urlencode([(k, REDACTED if is_secret_key(k) else v) for k, v in pairs], safe="<>")
    return urlunsplit((parts.scheme, netloc, parts.path, query, parts.fragment))
