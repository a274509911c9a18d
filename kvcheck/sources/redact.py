"""Secrets out of everything kvcheck prints or saves.

SGLang's ``GET /server_info`` returns every resolved server arg, secrets included
(``api_key``, ``admin_api_key``, ``ssl_keyfile_password``; ``launch_command`` may echo
``--api-key VALUE``; ``hicache_storage_backend_extra_config`` is JSON in a string that
can carry ``aws_secret_access_key``), and ``/model_info``, ``/route`` or an error body
may repeat any of them. kvcheck finds secret *values* and removes them everywhere:

* by field name, at any depth, in any spelling (``is_secret_key``): ``hf_token``,
  ``hftoken``, ``HF-Token``, ``dbpassword``, ``token_for_hub``, ``api_keys: [...]``
  (each string of a list), ``clientSecret``, ``aws_secret_access_key``;
* by content: the password of a URL (``redis://:pw@host``, ``https://u:pw@h``), the
  value after a secret-named flag or key in text (``--api-key X``, ``password=X``,
  ``"token": "X"``), a ``Bearer X``/``Basic X`` credential, and the secrets of JSON
  held in a string (parsed, then searched the same way);
* every value found is registered process-wide (``register_secrets``): the CLI passes
  every line it writes (tables, JSON, JUnit, GitHub annotations, snapshots, error lines)
  through ``scrub_output``, so a value seen once is removed wherever it reappears.

The placeholder is ``REDACTED`` (``"<redacted>"``, a string, so a redacted snapshot stays
valid input). ``None``/empty values are kept, so "no api key set" stays visible. Values
shorter than 4 characters (and words such as ``auto``/``none``) are redacted in their
field but not searched for elsewhere (that would mangle unrelated text).
"""

from __future__ import annotations

import functools
import json
import re
import threading
from collections.abc import Iterable
from typing import Any
from urllib.parse import parse_qsl, urlencode, urlsplit, urlunsplit

REDACTED = "<redacted>"

# Always secret, whatever the words say (the ones SGLang 0.5.23 has, and older ones).
SECRET_KEYS = frozenset({"api_key", "admin_api_key", "ssl_keyfile_password", "watermark_key", "watermark_key_b"})
# Secret markers searched in a field name lowercased with everything but letters and
# digits removed (``HF-Token`` -> ``hftoken``), after removing the compounds below.
_SECRET_MARKS = (
    "password",
    "passwd",
    "passphrase",
    "pwd",
    "secret",
    "credential",
    "apikey",
    "accesskey",
    "privatekey",
    "token",
    "auth",
    "cookie",
    "key",
)
# Compounds that contain a marker but name no secret: counts and tokenizer settings
# (``max_total_tokens``, ``tokenizer_path``, ``speculative_token_map``,
# ``bucket_time_to_first_token``), ``ssl_keyfile`` (a path), ``num_key_value_heads``,
# ``author``. Removed before the markers are searched, so ``ssl_keyfile_password``
# still has ``password``.
_NOT_SECRET_PARTS = re.compile(
    r"tokenizer|tokens|tokenmap|tokenlatency|tokenusage|tokendistribution|tokenid|tokentype|pertoken|firsttoken|"
    r"intertoken|keyfile|keyvalue|keyword|author(?!i[sz]ation)|monkey|hotkey"
)
# Markers that make a number a secret too (a count named ``max_token`` is not).
_NUMERIC_MARKS = ("password", "passwd", "passphrase", "secret", "credential", "apikey")
# Values kept out of the process-wide scrub list (too common to search for).
_MIN_SCRUB_LEN = 4
_COMMON_VALUES = frozenset(
    {"none", "null", "true", "false", "auto", "yes", "no", "default", "empty", "unset", REDACTED}
)
_MAX_JSON_IN_STRING = 1 << 20  # characters of a string field parsed as JSON

_WORD_SPLIT = re.compile(r"[^A-Za-z0-9]+|(?<=[a-z0-9])(?=[A-Z])")


def name_words(name: str) -> list[str]:
    """``"adminApiKey"`` / ``"admin-api-key"`` / ``"admin_api_key"`` -> ``["admin", "api", "key"]``."""
    return [w.lower() for w in _WORD_SPLIT.split(name.lstrip("-")) if w]


def _squash(name: str) -> str:
    return re.sub(r"[^a-z0-9]", "", name.lower())


def is_secret_key(name: Any) -> bool:
    """Whether a field (or flag, or variable) name holds a secret, in any spelling and
    case: one of ``SECRET_KEYS``, or a name that, lowercased with separators removed
    and known non-secret compounds (``tokens``, ``tokenizer``, ``keyfile``,
    ``keyvalue``...) taken out, contains password/passwd/pwd/secret/credential/token/
    auth/cookie/key (``hftoken``, ``dbpassword``, ``token_for_hub``, ``api_keys``).
    Not ``max_total_tokens``, ``tokenizer_path``, ``speculative_token_map``,
    ``ssl_keyfile`` or ``num_key_value_heads``."""
    if not isinstance(name, str) or not name:
        return False
    return _is_secret_name(name)


@functools.lru_cache(maxsize=8192)
def _is_secret_name(name: str) -> bool:
    """``is_secret_key`` of a non-empty string, once per name and process."""
    if name.lstrip("-").replace("-", "_").lower() in SECRET_KEYS:
        return True
    squashed = _NOT_SECRET_PARTS.sub("", _squash(name))
    if any(m in squashed for m in _SECRET_MARKS):
        return True
    words = name_words(name)
    return any(
        w in _SECRET_WORDS
        and not (w == "pass" and i and words[i - 1] in ("forward", "backward", "single", "multi", "by"))
        for i, w in enumerate(words)
    )


# Whole words of a name that mark a secret (``db_pass``, ``smtp_pw``, ``github_pat``).
_SECRET_WORDS = frozenset(
    {"pass", "pw", "pword", "pat", "pin", "sig", "signature", "bearer", "jwt", "sas", "otp", "nonce", "salt", "hmac"}
)
# Marker words a misspelled or cut-short flag name is compared with (``--api-kye``,
# ``--hf-tokn``, ``--api-ke``): Damerau-Levenshtein distance 1 from one of these words,
# when the word is no word of a real SGLang flag name.
_NEAR_MISS_OF = (
    "key",
    "keys",
    "token",
    "password",
    "passwd",
    "secret",
    "auth",
    "credential",
    "credentials",
    "apikey",
    "pass",
)


def _distance_le1(a: str, b: str) -> bool:
    """Whether ``a`` and ``b`` are at most one edit apart (insert, delete, substitute,
    or swap of two neighbours)."""
    if a == b:
        return True
    la, lb = len(a), len(b)
    if abs(la - lb) > 1:
        return False
    if la == lb:
        diff = [i for i in range(la) if a[i] != b[i]]
        if len(diff) == 1:
            return True
        return len(diff) == 2 and diff[1] == diff[0] + 1 and a[diff[0]] == b[diff[1]] and a[diff[1]] == b[diff[0]]
    if la > lb:
        a, b = b, a
    i = 0
    while i < len(a) and a[i] == b[i]:
        i += 1
    return a[i:] == b[i + 1 :]


_FLAG_WORDS: frozenset[str] | None = None
_SECRET_FLAG_NAMES: tuple[str, ...] | None = None


def _flag_vocabulary() -> tuple[frozenset[str], tuple[str, ...]]:
    """(every word of every SGLang flag name of every modeled release, the secret flags'
    names): the words a near miss is never taken for, and what an abbreviation expands to."""
    global _FLAG_WORDS, _SECRET_FLAG_NAMES
    if _FLAG_WORDS is None or _SECRET_FLAG_NAMES is None:
        words: set[str] = set()
        secret: set[str] = {k.replace("_", "-") for k in SECRET_KEYS} | {"hf-token", "api-key"}
        try:
            from kvcheck.sglang.flags import FlagTable

            for opt in FlagTable.load().option_strings:
                name = opt.lstrip("-")
                if is_secret_key(name):
                    secret.add(name)
                else:
                    words.update(name_words(name))
        except Exception:  # the scrub must work without the flag store
            pass
        _FLAG_WORDS, _SECRET_FLAG_NAMES = frozenset(words), tuple(sorted(secret))
    return _FLAG_WORDS, _SECRET_FLAG_NAMES


_REAL_FLAGS: frozenset[str] | None = None


def _real_flag_names() -> frozenset[str]:
    global _REAL_FLAGS
    if _REAL_FLAGS is None:
        try:
            from kvcheck.sglang.flags import FlagTable

            _REAL_FLAGS = frozenset(o.lstrip("-") for o in FlagTable.load().option_strings)
        except Exception:
            _REAL_FLAGS = frozenset()
    return _REAL_FLAGS


def is_secret_flag(name: Any) -> bool:
    """Whether a command-line option names a secret: ``is_secret_key``, or an
    abbreviation SGLang's argparse would expand to a secret flag (``--api-ke``,
    ``--admin-api``, ``--ssl-keyfile-pass``), or a near miss of a secret word that is no
    word of a real flag (``--api-kye``, ``--hf-tokn``, ``--pasword``)."""
    if not isinstance(name, str) or not name:
        return False
    if is_secret_key(name):
        return True
    bare = name.lstrip("-").replace("_", "-").lower()
    if len(bare) < 3 or len(bare) > 100:
        return False
    words, secret = _flag_vocabulary()
    if bare in _real_flag_names():
        return False  # a real, non-secret flag (--ssl-keyfile: a path)
    if any(s.startswith(bare) for s in secret):
        return True
    for w in name_words(bare):
        if w in words or len(w) < 2:
            continue
        if any(_distance_le1(w, m) for m in _NEAR_MISS_OF):
            return True
    return False


def _numeric_secret_key(name: Any) -> bool:
    if not isinstance(name, str):
        return False
    if name.lstrip("-").replace("-", "_").lower() in SECRET_KEYS:
        return True
    squashed = _NOT_SECRET_PARTS.sub("", _squash(name))
    return any(m in squashed for m in _NUMERIC_MARKS)


def _is_secret_item(key: Any, value: Any) -> bool:
    """A secret-named key holding a value worth hiding: a non-empty string, a list of
    them, or a number under a password/secret/api-key name (numbers under ``*_token``
    are counts)."""
    if not is_secret_key(key) or value is None or value == "" or isinstance(value, bool):
        return False
    if isinstance(value, str):
        return True
    if isinstance(value, (list, tuple)):
        return any(isinstance(v, str) and v for v in value)
    if isinstance(value, (int, float)):
        return _numeric_secret_key(key)
    return False


# Text patterns whose value is a secret: URL passwords, secret-named flags or keys
# followed by a value, and HTTP credentials.
_URL_PASSWORD = re.compile(r"(?<=://)([^/@\s:]*):([^/@\s]+)@")
_SECRET_FLAG = re.compile(r"(?<![\w-])(--?[A-Za-z0-9][A-Za-z0-9_-]*)(=|\s+)(\"[^\"]*\"|'[^']*'|[^\s\"',;&]+)")
_KEY_VALUE = re.compile(
    r"""(?<![A-Za-z0-9_-])([A-Za-z_][A-Za-z0-9_.-]*)["']?\s*[:=]\s*("[^"]*"|'[^']*'|[^\s"',;&}\]]+)"""
)
_MAX_REREAD = 16  # values of one line searched again for a KEY=VALUE inside them
# flags whose value is ``user:password`` (etcdctl, curl, wget)
_USER_FLAGS = frozenset({"--user", "-u", "--proxy-user", "--http-user", "--basic-auth"})
_HTTP_CREDENTIAL = re.compile(
    r"\b(?:[Bb]earer|(?i:authorization)[\s:='\"]*(?:header[\s:='\"]*)?(?:[Bb]asic|[Tt]oken))\s+([A-Za-z0-9._~+/=-]{8,})"
)
# an unquoted number (a count, a size, a ratio)
_NUMBER = re.compile(r"[-+]?\d+(?:\.\d+)?(?:[eE][-+]?\d+)?")
# a Python exception's class name, as a traceback's last line starts with it
_EXCEPTION_NAME = re.compile(r"^[A-Z]\w*(?:Error|Exception|Warning)$")


# Secrets by shape, wherever they stand: the token formats of the services a CI job
# holds keys for (Hugging Face, OpenAI/Anthropic/Stripe-style ``sk-``/``sk_live_``,
# GitHub classic and fine-grained, Slack, AWS access key ids, JWTs) and PEM private keys.
_TOKEN_SHAPES = re.compile(
    r"(?<![A-Za-z0-9_])(?:"
    r"hf_[A-Za-z0-9]{16,}"
    r"|sk-(?:ant-|proj-)?[A-Za-z0-9_-]{16,}"
    r"|[sr]k_(?:live|test)_[A-Za-z0-9]{8,}"
    r"|gh[pousr]_[A-Za-z0-9]{20,}"
    r"|github_pat_[A-Za-z0-9_]{20,}"
    r"|xox[abposr]-[A-Za-z0-9-]{8,}"
    r"|(?:AKIA|ASIA)[0-9A-Z]{16}"
    r"|glpat-[A-Za-z0-9_-]{16,}"
    r"|eyJ[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}\.[A-Za-z0-9_-]{4,}"
    r")"
)
_PEM_BLOCK = re.compile(
    r"-----BEGIN [A-Z0-9 ]*(?:PRIVATE KEY|CERTIFICATE REQUEST|SECRET)[A-Z ]*-----.*?(?:-----END [A-Z0-9 ]*-----|\Z)",
    re.S,
)
# The userinfo of a URL (``https://TOKEN@host``, ``redis://user:pw@host``): all of it.
_URL_USERINFO = re.compile(r"(?<=://)([^/@\s?#]+)@(?=[^\s/@]*)")
# ``?token=X`` / ``&api_key=X`` / ``;sig=X`` query parameters named like secrets.
_QUERY_PARAM = re.compile(r"([?&;])([A-Za-z0-9_.~-]+)=([^&#\s\"'<>]*)")


def _shape_secrets(text: str, found: set[str]) -> None:
    for m in _TOKEN_SHAPES.finditer(text):
        found.add(m.group(0))
    if "-----BEGIN" in text:
        for m in _PEM_BLOCK.finditer(text):
            found.add(m.group(0))
    if "://" in text:
        for m in _URL_USERINFO.finditer(text):
            user = m.group(1)
            found.add(user.split(":", 1)[1] if ":" in user else user)
            if ":" in user and len(user.split(":", 1)[0]) >= 12:
                found.add(user.split(":", 1)[0])
    if "=" in text:
        for m in _QUERY_PARAM.finditer(text):
            if m.group(3) and is_secret_key(m.group(2)):
                found.add(m.group(3))


def _text_secrets(text: str, found: set[str]) -> None:
    """Secret values that ``text`` itself marks (see the module doc). Short strings are
    looked at once per process: an unpinned deployment builds each server's side once per
    release of its window, from the same strings."""
    if len(text) <= _CACHED_TEXT_LEN:
        found.update(_short_text_secrets(text))
    else:
        _scan_text_secrets(text, found)


# Strings up to this length have their secrets remembered (``_short_text_secrets``).
_CACHED_TEXT_LEN = 4096


@functools.lru_cache(maxsize=8192)
def _short_text_secrets(text: str) -> frozenset[str]:
    found: set[str] = set()
    _scan_text_secrets(text, found)
    return frozenset(found)


def _scan_text_secrets(text: str, found: set[str]) -> None:
    if len(text) > _MAX_JSON_IN_STRING:
        text = text[:_MAX_JSON_IN_STRING]
    for m in _URL_PASSWORD.finditer(text):
        found.add(m.group(2))
    for m in _HTTP_CREDENTIAL.finditer(text):
        found.add(m.group(1))
    _shape_secrets(text, found)
    if any(c in text for c in "=:-"):
        for m in _SECRET_FLAG.finditer(text):
            value = m.group(3).strip("\"'")
            if is_secret_flag(m.group(1)):
                found.add(value)
            elif m.group(1) in _USER_FLAGS and ":" in value:  # etcdctl --user root:PW, curl -u user:PW
                found.add(value.split(":", 1)[1])
        # a key's value may itself hold ``KEY=VALUE`` (``RuntimeError: ETCDCTL_PASSWORD=X``,
        # ``failed: AWS_SESSION_TOKEN=X``): a value not secret that holds a marker word is
        # searched again, at most _MAX_REREAD times a line (``monkey=monkey=...`` stays linear)
        pos, reread = 0, 0
        while (kv := _KEY_VALUE.search(text, pos)) is not None:
            pos = kv.end()
            # ``KeyError: 'kv_args'`` / ``TokenizerError: ...``: an exception's name and its
            # message, no secret-named field (a token in the message is still a token shape);
            # an unquoted number is a secret only under a password/secret/api-key name, as in a
            # structured value (``_is_secret_item``): SGLang's "Decode batch. ... #token: 40213"
            # is a count, and registering it scrubbed every "40213" of the log (room ids, ports)
            if (
                is_secret_key(kv.group(1))
                and not _EXCEPTION_NAME.search(kv.group(1))
                and (not _NUMBER.fullmatch(kv.group(2)) or _numeric_secret_key(kv.group(1)))
            ):
                found.add(kv.group(2).strip("\"'"))
            elif reread < _MAX_REREAD and _MAY_HOLD_SECRET.search(kv.group(2)) and kv.start(2) > kv.start():
                pos, reread = kv.start(2), reread + 1
    stripped = text.strip()
    if stripped[:1] in "{[" and stripped[-1:] in "}]":
        try:
            inner = json.loads(stripped)
        except (ValueError, RecursionError):
            return
        _walk_secrets(inner, found, depth=0)


def _walk_secrets(node: Any, found: set[str], depth: int) -> None:
    if depth > 64:
        return
    if isinstance(node, dict):
        for k, v in node.items():
            if _is_secret_item(k, v):
                if isinstance(v, (list, tuple)):
                    found.update(x for x in v if isinstance(x, str) and x)
                else:
                    found.add(str(v))
            if isinstance(k, str) and ("://" in k or "=" in k):
                _text_secrets(k, found)
            _walk_secrets(v, found, depth + 1)
    elif isinstance(node, (list, tuple)):
        for v in node:
            _walk_secrets(v, found, depth + 1)
    elif isinstance(node, str) and node:
        _text_secrets(node, found)


def collect_secrets(obj: Any, extra: Iterable[str | None] = ()) -> set[str]:
    """Every secret value in ``obj`` (parsed JSON/YAML, args, env, any depth): values of
    secret-named fields (strings, string lists, password-like numbers), URL passwords,
    secret flag/key values inside strings, JSON inside strings; plus the ``extra``
    values (e.g. the bearer token). What ``scrub`` removes."""
    found: set[str] = {s for s in extra if isinstance(s, str) and s}
    _walk_secrets(obj, found, 0)
    found.discard(REDACTED)
    found.discard("")
    return found


def secrets_from_argv(argv: Iterable[str]) -> set[str]:
    """Values of secret-named options in a launch line's tokens: ``--api-key X``,
    ``--api-key=X``, ``--hf-token X`` (any name ``is_secret_key`` marks), plus what each
    token itself marks (URL passwords, JSON inside strings)."""
    found: set[str] = set()
    tokens = [t for t in argv if isinstance(t, str)]
    for i, tok in enumerate(tokens):
        if tok.startswith("-"):
            name, eq, value = tok.partition("=")
            if is_secret_flag(name):
                if eq:
                    found.add(value)
                elif i + 1 < len(tokens) and not tokens[i + 1].startswith("--"):
                    found.add(tokens[i + 1])
        _text_secrets(tok, found)
    found.discard("")
    return found


# ---- the process-wide registry -------------------------------------------------------

_REGISTRY: set[str] = set()
_LOCK = threading.Lock()
_PATTERN: tuple[frozenset[str], re.Pattern[str] | None] = (frozenset(), None)


def _scrubbable(value: str) -> bool:
    return len(value) >= _MIN_SCRUB_LEN and value.lower() not in _COMMON_VALUES


def register_secrets(values: Iterable[str]) -> None:
    """Add secret values to the process-wide set every output is scrubbed of
    (``scrub_output``). Short and common values are left out (see the module doc)."""
    with _LOCK:
        _REGISTRY.update(v for v in values if isinstance(v, str) and _scrubbable(v))


# A line that may mark a secret (a secret-named key or flag, a credential, a URL userinfo, a
# token shape): only such lines of a log are searched (``register_text_secrets``)
_MAY_HOLD_SECRET = re.compile(
    r"(?i)key|token|secret|pass|pwd|auth|cred|cookie|bearer|://|-----BEGIN|sk[-_]|rk_|hf_|gh[pousr]_|github_pat|xox|"
    r"AKIA|ASIA|glpat|eyJ"
)


def register_text_secrets(lines: Iterable[str]) -> None:
    """Register the secret values that lines of free text mark themselves (a log or a
    pasted message: ``api_key='X'`` in a ``ServerArgs(...)`` dump, ``--api-key X``,
    ``HF_TOKEN=X``, ``Bearer X``, a token shape), each line searched alone (a long log is
    never cut to its first MiB), so that whatever kvcheck prints of the text is scrubbed of
    them. Lines without a secret marker are skipped cheaply."""
    found: set[str] = set()
    for line in lines:
        if _MAY_HOLD_SECRET.search(line):
            _text_secrets(line, found)
    if found:
        register_secrets(found)


def scrubbed_text_lines(lines: list[str]) -> list[str]:
    """``lines`` of free text (a log block, a pasted message) with their marked secrets
    registered (``register_text_secrets``) and then scrubbed out of the lines themselves,
    before anything reads them: a reader that clips a line (a 200-character timeline
    event) can otherwise cut a registered token to a prefix that the output boundary no
    longer recognizes, and print that prefix. Only a line holding a registered value is
    rewritten (every secret a line marks was registered from it just before): the rest
    are returned as they are, at the cost of one search of the registry per line."""
    register_text_secrets(lines)
    known = _pattern_for(registered_secrets())
    if known is None:
        return lines
    return [scrub(line) if known.search(line) else line for line in lines]


def registered_secrets() -> frozenset[str]:
    """The process-wide secret values registered so far."""
    with _LOCK:
        return frozenset(_REGISTRY)


def clear_registry() -> None:
    """Forget every registered secret (tests)."""
    with _LOCK:
        _REGISTRY.clear()


def _pattern_for(values: frozenset[str]) -> re.Pattern[str] | None:
    global _PATTERN
    cached_for, pattern = _PATTERN
    if cached_for == values:
        return pattern
    pattern = re.compile("|".join(re.escape(v) for v in sorted(values, key=len, reverse=True))) if values else None
    _PATTERN = (values, pattern)
    return pattern


def scrub(text: str, secrets: Iterable[str] = ()) -> str:
    """``text`` with every secret value (``secrets`` and the process-wide registry)
    replaced, the value after a secret-named flag or key replaced (``--api-key X``,
    ``--hf-token=X``, ``password=X``), HTTP credentials and URL passwords removed."""
    if not isinstance(text, str) or not text:
        return text
    values = registered_secrets() | {s for s in secrets if isinstance(s, str) and _scrubbable(s)}
    pattern = _pattern_for(frozenset(values))
    if pattern is not None:
        text = pattern.sub(REDACTED, text)

    def flag_value(m: re.Match) -> str:
        return (
            f"{m.group(1)}{m.group(2)}{REDACTED}"
            if is_secret_flag(m.group(1)) and m.group(3).strip("\"'") != REDACTED
            else m.group(0)
        )

    def query_value(m: re.Match) -> str:
        return (
            f"{m.group(1)}{m.group(2)}={REDACTED}"
            if m.group(3) and m.group(3) != REDACTED and is_secret_key(m.group(2))
            else m.group(0)
        )

    if "-" in text:
        text = _SECRET_FLAG.sub(flag_value, text)
    if "://" in text:
        text = _URL_USERINFO.sub(_userinfo_sub, text)
    if "=" in text:
        text = _QUERY_PARAM.sub(query_value, text)
    text = _TOKEN_SHAPES.sub(REDACTED, text)
    if "-----BEGIN" in text:
        text = _PEM_BLOCK.sub(REDACTED, text)
    return _HTTP_CREDENTIAL.sub(lambda m: m.group(0).replace(m.group(1), REDACTED), text)


def _userinfo_sub(m: re.Match) -> str:
    """A URL's userinfo without its secret: ``user:<redacted>@`` (a short user name
    kept), ``<redacted>@`` for a lone user part (``https://TOKEN@host``)."""
    info = m.group(1)
    if info == REDACTED or info.endswith(":" + REDACTED):
        return m.group(0)
    if ":" in info:
        user = info.split(":", 1)[0]
        keep = (
            user
            if len(user) < 12 and not _TOKEN_SHAPES.search(user) and user != REDACTED
            else (REDACTED if user else "")
        )
        return f"{keep}:{REDACTED}@"
    return f"{REDACTED}@"


def scrub_output(text: str) -> str:
    """What every output of the CLI passes through: ``scrub`` with the registry only."""
    return scrub(text)


def redact(obj: Any, secrets: Iterable[str] = ()) -> Any:
    """A deep copy of ``obj`` (dicts, lists, scalars from JSON) with secret-keyed values
    replaced by ``REDACTED`` (each string of a list under a secret name too; ``None``
    and ``""`` kept, so "unset" stays visible) and every string scrubbed of ``secrets``
    plus the secrets found in ``obj`` itself. The found secrets are registered
    process-wide (``register_secrets``)."""
    known = collect_secrets(obj, secrets)
    register_secrets(known)

    def walk(node: Any) -> Any:
        if isinstance(node, dict):
            out = {}
            for k, v in node.items():
                if _is_secret_item(k, v):
                    out[k] = (
                        [REDACTED if isinstance(x, str) and x else walk(x) for x in v]
                        if isinstance(v, (list, tuple))
                        else REDACTED
                    )
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


def leaf_strings(obj: Any, limit: int = 100_000) -> list[str]:
    """Every key and scalar of ``obj`` (parsed YAML/JSON) as a string, iteratively, at
    most ``limit`` of them."""
    out: list[str] = []
    stack = [obj]
    while stack and len(out) < limit:
        node = stack.pop()
        if isinstance(node, dict):
            for k, v in node.items():
                out.append(str(k))
                stack.append(v)
        elif isinstance(node, (list, tuple)):
            stack.extend(node)
        elif node is not None and not isinstance(node, bool):
            out.append(str(node))
    return out


def scrub_tree(obj: Any) -> Any:
    """A copy of ``obj`` (parsed JSON) with every string, keys included, passed through
    ``scrub_output``; structure and types kept, so the result dumps as valid JSON."""
    if isinstance(obj, dict):
        return {scrub_output(k) if isinstance(k, str) else k: scrub_tree(v) for k, v in obj.items()}
    if isinstance(obj, (list, tuple)):
        return [scrub_tree(v) for v in obj]
    if isinstance(obj, str):
        return scrub_output(obj)
    return obj
