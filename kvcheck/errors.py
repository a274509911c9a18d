"""Errors kvcheck raises on purpose, each mapped to a stable exit status.

Exit statuses (the contract in DESIGN.md part 3):
0 pass (warnings allowed), 1 fail, 2 bad input or usage (nothing checked),
3 a live source could not be reached in time, 4 unchecked (kvcheck could not decide a
pair: unknown model or release, a pool it does not model, an unresolved variable; the
gate fails unless ``--allow-unchecked``).
"""

from __future__ import annotations

EXIT_PASS = 0
EXIT_FAIL = 1
EXIT_INPUT = 2
EXIT_UNREACHABLE = 3
EXIT_UNCHECKED = 4


class KvcheckError(Exception):
    """Base class: a one-line message for a person, and an exit status."""

    exit_code = EXIT_INPUT

    def __init__(self, message: str, *, source: str | None = None, field: str | None = None):
        self.source = source
        self.field = field
        parts = []
        if source:
            parts.append(str(source))
        if field:
            parts.append(f"field {field!r}")
        prefix = ": ".join(parts)
        super().__init__(f"{prefix}: {message}" if prefix else message)


class InputError(KvcheckError):
    """Bad input (missing file, syntax error, unknown flag, wrong type): exit 2."""

    exit_code = EXIT_INPUT


class ArgparseRefusal(InputError):
    """SGLang's own argument parser refuses a server's flags in a way the release decides
    (an abbreviation that matches several flags: ``ambiguous option: --page could match
    --page-size, ...``): the server prints its usage and exits with status 2 at start-up.

    Raised while a side is read. ``kvcheck preflight`` reports it as that side's start-up
    refusal (an error finding, exit 1, see ``kvcheck.cluster.refusals.refusal_finding``), since the
    input itself is readable and the runtime's answer is certain; any caller that does not
    handle it treats it as bad input (exit 2), as before.

    ``argparse_message``: the text after ``error: `` that argparse prints (Python 3.11,
    ``ArgumentParser._parse_optional``); ``option``: the token; ``release`` /
    ``version_source``: the SGLang release whose flag table refused it (set by the reader).
    """

    def __init__(self, argparse_message: str, *, option: str, source: str | None = None, field: str | None = None):
        super().__init__(argparse_message, source=source, field=field)
        self.argparse_message = argparse_message
        self.option = option
        self.release: str | None = None
        self.version_source: str = ""


class UncheckedError(KvcheckError):
    """kvcheck cannot decide before it could build a report (a release it does not model
    whose flags no modeled release reads): exit 4."""

    exit_code = EXIT_UNCHECKED


class UnreachableError(KvcheckError):
    """A live source (server, bootstrap server, NIXL agent) did not answer in time: exit 3."""

    exit_code = EXIT_UNREACHABLE
