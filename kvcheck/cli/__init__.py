"""The command line. Thin: parse options, call the library, render, exit.

One module per command (``preflight``, ``explain``, ``live``: snapshot/agent/inspect,
``fabric``, ``checks``), the typer application in ``root`` (``make_app``), shared options
in ``options``, and the output boundary (secret scrubbing, one-line errors) in ``output``.
``main`` is the console script; ``app`` (the whole typer application, built on first use)
is what ``typer.testing.CliRunner`` drives. ``preflight``'s options are one table
(``preflight.OPTIONS``) from which typer's command is built; typer parses every
command line.

Exit statuses: 0 pass (warnings allowed), 1 fail, 2 bad input or usage (nothing
checked), 3 a live source could not be reached in time, 4 unchecked (0 with
``--allow-unchecked``).
"""

from __future__ import annotations

import os
import sys
from typing import TYPE_CHECKING, Any

from kvcheck.errors import EXIT_INPUT, KvcheckError

if TYPE_CHECKING:
    import typer

    app: typer.Typer

_app: Any = None


def __getattr__(name: str) -> Any:
    """``kvcheck.cli.app``: the whole application, built once on first use."""
    global _app
    if name == "app":
        if _app is None:
            from kvcheck.cli.root import make_app

            _app = make_app()
        return _app
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


def _command_of(argv: list[str]) -> str | None:
    """The command ``argv`` names (its first word that is not an option), or None."""
    return next((tok for tok in argv if not tok.startswith("-")), None)


# the commands whose -o/--format writes JSON
_JSON_BY_FORMAT = frozenset({"preflight", "explain", "fabric"})


def main() -> None:
    """Entry point: run the app, turning every error into one line and an exit status.

    Usage errors (unknown option, missing value) exit 2 through click's own handling;
    kvcheck's errors exit with their status (2 bad input, 3 unreachable); an unexpected
    exception is one line and exit 2 (``KVCHECK_DEBUG=1`` shows the traceback). Every
    line written to stdout and stderr passes through ``scrub_output``. A command line that
    names a known command registers that command alone (``root.make_app(only=...)``):
    the others' modules are not imported.
    """
    from kvcheck.cli.output import (
        ScrubbingStream,
        State,
        json_error,
        quiet_stdout,
        register_own_credentials,
        say_error,
        wants_json,
    )

    argv = sys.argv[1:]
    register_own_credentials(argv)
    if not isinstance(sys.stdout, ScrubbingStream):
        sys.stdout = ScrubbingStream(sys.stdout)
    if not isinstance(sys.stderr, ScrubbingStream):
        sys.stderr = ScrubbingStream(sys.stderr)
    try:
        from kvcheck.cli.root import COMMANDS, make_app

        command = _command_of(argv)
        if command in _JSON_BY_FORMAT and "--json" in argv[: argv.index("--") if "--" in argv else len(argv)]:
            # the spelling other tools use: said with the one kvcheck takes (click would say only
            # "No such option: --json")
            say_error(f"kvcheck {command}: error: no option --json: use -o json (--format json)")
            sys.exit(EXIT_INPUT)
        application = make_app(only=command) if command in COMMANDS else make_app()
        application(standalone_mode=True)
    except KvcheckError as exc:
        say_error(f"kvcheck: error: {exc}")
        if wants_json(argv):
            json_error(exc)
        sys.exit(exc.exit_code)
    except BrokenPipeError:
        quiet_stdout()
        sys.exit(State.decided_exit if State.decided_exit is not None else 0)
    except KeyboardInterrupt:
        say_error("kvcheck: interrupted")
        sys.exit(130)
    except (OSError, ValueError, OverflowError, RecursionError, MemoryError) as exc:
        if os.environ.get("KVCHECK_DEBUG"):
            raise
        say_error(f"kvcheck: error: {type(exc).__name__}: {exc}")
        sys.exit(EXIT_INPUT)
    except Exception as exc:
        if os.environ.get("KVCHECK_DEBUG"):
            raise
        say_error(
            f"kvcheck: internal error, nothing was checked ({type(exc).__name__}: {exc}); rerun with KVCHECK_DEBUG=1 "
            "for the traceback"
        )
        sys.exit(EXIT_INPUT)
