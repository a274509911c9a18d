"""The CLI's output boundary: secrets scrubbed from every line, one-line errors, JSON
errors for ``-o json``, and the exit status already decided when output is written.

Imports neither typer nor any renderer: ``kvcheck.cli.main`` sets this up before the
command line is parsed.
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from kvcheck.errors import KvcheckError


class State:
    """The exit status already decided when output is being written (a command sets it
    before rendering): a reader that closes the pipe early (``| head``) must not turn a
    PASS into a failure."""

    decided_exit: int | None = None


class ScrubbingStream:
    """A text stream that passes every write through ``scrub_output`` (the process-wide
    secret values, URL passwords, secret flag values) before the real stream: the
    output boundary for tables, JSON, JUnit, GitHub annotations and error lines.
    Everything else is delegated to the wrapped stream (``isatty``, ``fileno``...)."""

    def __init__(self, stream):
        self._stream = stream

    def write(self, text):
        from kvcheck.sources.limits import escape_stream
        from kvcheck.sources.redact import scrub_output

        # secrets out, then every control/escape/bidi character an input carried made
        # visible (only the SGR styling kvcheck's renderer writes passes)
        return self._stream.write(escape_stream(scrub_output(text)) if isinstance(text, str) else text)

    def writelines(self, lines):
        for line in lines:
            self.write(line)

    def __getattr__(self, name):
        return getattr(self._stream, name)


def say_error(text: str) -> None:
    """One error line on stderr: secrets scrubbed, every line clipped (a 10 MB value
    prints as its first characters and its length)."""
    from kvcheck.sources.limits import clip_line, escape_terminal
    from kvcheck.sources.redact import scrub_output

    lines = [clip_line(escape_terminal(scrub_output(line))) for line in str(text).splitlines() or [""]]
    sys.stderr.write("\n".join(lines[:20]) + "\n")
    sys.stderr.flush()


def wants_json(argv: list[str]) -> bool:
    """Whether the command line asks for JSON on stdout (``-o json``, ``--format json``,
    ``--output=json``)."""
    for i, tok in enumerate(argv):
        if tok in ("-o", "--format", "--output") and i + 1 < len(argv) and argv[i + 1] == "json":
            return True
        if tok in ("--format=json", "--output=json", "-ojson"):
            return True
    return False


def json_error(exc: KvcheckError) -> None:
    """One JSON object on stdout for an error that stopped the run, so a CI step that
    parses stdout reads why nothing was checked: ``{"error": {"message", "source",
    "field"}, "exit_code": N}`` (no ``verdict``: nothing was decided)."""
    import json

    from kvcheck.sources.limits import clip_line
    from kvcheck.sources.redact import scrub_output

    body = {
        "error": {
            "message": clip_line(scrub_output(str(exc))),
            "source": None if exc.source is None else clip_line(scrub_output(str(exc.source))),
            "field": exc.field,
        },
        "exit_code": exc.exit_code,
    }
    try:
        sys.stdout.write(json.dumps(body) + "\n")
        sys.stdout.flush()
    except (OSError, ValueError):
        pass


def register_own_credentials(argv: list[str]) -> None:
    """kvcheck's own credentials (``KVCHECK_API_KEY``, ``--api-key``) are scrubbed from
    every output from the start: a server may reflect them (a header, a reason phrase)."""
    from kvcheck.sources.redact import register_secrets, secrets_from_argv

    own = {os.environ.get("KVCHECK_API_KEY") or ""} | secrets_from_argv(argv)
    register_secrets(v for v in own if v)


def quiet_stdout() -> None:
    """Point stdout at /dev/null so the interpreter's final flush cannot fail again."""
    try:
        devnull = os.open(os.devnull, os.O_WRONLY)
        os.dup2(devnull, sys.stdout.fileno())
    except OSError:
        pass


def write_report(write) -> None:
    """Run ``write()`` (render the report to stdout) and flush; a reader that closed the
    pipe early (``| head``) does not change the verdict."""
    try:
        write()
        sys.stdout.flush()
    except BrokenPipeError:
        quiet_stdout()
