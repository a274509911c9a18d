"""What kvcheck makes of a live server's answer before using it: header text fit for a
message, and fields whose JSON type no SGLang flag can hold (``kvcheck.sources.live``
turns those into exit 3). Strict JSON itself is ``kvcheck.sources.limits.strict_json_loads``.
"""

from __future__ import annotations

from typing import Any

from kvcheck.sources.redact import REDACTED, scrub


def _header_text(text: Any, secrets: Any = ()) -> str:
    """A header value or HTTP reason phrase a server chose, fit for a message: secrets
    removed (kvcheck's own API key, reflected), control and escape characters made
    visible, at most 80 characters."""
    from kvcheck.sources.limits import clip, escape_terminal

    text = str(text or "")
    for secret in secrets or ():
        if isinstance(secret, str) and len(secret) >= 3:
            text = text.replace(secret, REDACTED)
    return clip(escape_terminal(scrub(text, secrets)), 80)


def _mistyped_fields(info: dict[str, Any]) -> list[str]:
    """The ``/server_info`` fields kvcheck types (``ServerArgs`` fields that are SGLang
    flags) whose value is of a JSON type the flag cannot hold: a list or object for a
    scalar flag (``model_path: [...]``), a string where a number goes. Malformed live
    data (exit 3), not the user's input."""
    from kvcheck.sglang.args import ServerArgs
    from kvcheck.sglang.flags import FlagTable

    table = FlagTable.load()
    out = []
    for key, value in info.items():
        if value is None or not isinstance(key, str) or key not in ServerArgs.model_fields:
            continue
        flag = table.by_field(key)
        if flag is None:
            continue
        scalar = (
            flag.action == "store"
            and flag.nargs is None
            and flag.type in ("str", "int", "float", "nullable_str", "human_int")
            and not isinstance(flag.default, (dict, list))
        )
        if scalar and isinstance(value, (dict, list)):
            out.append(key)
        elif (
            isinstance(value, str) and flag.type in ("int", "float") and flag.action == "store" and flag.choices is None
        ):
            try:
                float(value)
            except ValueError:
                out.append(key)
    return out[:5]
