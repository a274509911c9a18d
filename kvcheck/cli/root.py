"""The typer application: the root options and the commands, registered by name.

``make_app()`` builds the whole application (``kvcheck --help`` lists every command);
``make_app(only="preflight")`` registers that one command alone, so a run of one command
imports and inspects only that command's module (``kvcheck.cli.main`` does this when the
command line names a known command; typer then parses exactly as in the whole app).
"""

from __future__ import annotations

import typer

# name -> (module, function, epilog attribute of the module or None), in the order
# ``kvcheck --help`` lists them. preflight's function is built from its option table
# (``kvcheck.cli.preflight_options.OPTIONS``, the one declaration typer's command is built from).
COMMANDS: dict[str, tuple[str, str, str | None]] = {
    "preflight": ("kvcheck.cli.preflight", "OPTIONS", "EPILOG"),
    "snapshot": ("kvcheck.cli.live", "snapshot", None),
    "agent": ("kvcheck.cli.live", "agent", None),
    "inspect": ("kvcheck.cli.live", "inspect_agent", None),
    "fabric": ("kvcheck.cli.fabric", "fabric", None),
    "checks": ("kvcheck.cli.checks", "list_checks", None),
    "explain": ("kvcheck.cli.explain", "explain", "EPILOG"),
}

EXIT_STATUS = (
    "Exit status: 0 pass (warnings allowed), 1 fail, 2 bad input or usage, 3 a live source "
    "could not be reached in time, 4 unchecked (a pair kvcheck cannot decide; 0 with --allow-unchecked). "
    "explain: 0 something was explained, 1 nothing was, 2 bad input (kvcheck explain --help)."
)


def app_help() -> str:
    """The top-level help: what kvcheck decides, for which backends and releases."""
    from kvcheck.release import manifest

    pd = manifest.pd_releases()
    return (
        "Will your SGLang prefill and decode servers move KV cache between them, over NIXL or Mooncake? "
        "kvcheck answers before anything starts, in well under a second, by restating each SGLang release's own "
        f"decision code (releases {pd[0]} to {pd[-1]}; a deployment that pins no release is decided on every "
        "release it may run).\n\n" + EXIT_STATUS
    )


def _version(value: bool) -> None:
    """``--version``: kvcheck's version and the SGLang releases it models, then exit 0."""
    if value:
        from kvcheck import __version__
        from kvcheck.release import manifest
        from kvcheck.sglang.releases import describe_modeled

        pd = manifest.pd_releases()
        typer.echo(
            f"kvcheck {__version__} (models SGLang {describe_modeled()}: their flags; the PD path of {pd[0]} to "
            f"{pd[-1]} ({len(pd)} releases); NIXL probe: nixl-cu12 1.5.1)"
        )
        raise typer.Exit(0)


def _root(
    version: bool = typer.Option(
        False,
        "--version",
        "-V",
        callback=_version,
        is_eager=True,
        help="Print kvcheck's version and the SGLang releases it models (flags; the PD path), then exit.",
    ),
) -> None:
    """The root options (the help is ``app_help()``)."""


def make_app(only: str | None = None) -> typer.Typer:
    """The kvcheck application; ``only``: register that command alone (see the module doc)."""
    import importlib

    app = typer.Typer(
        name="kvcheck",
        help=app_help(),
        no_args_is_help=True,
        add_completion=False,
        pretty_exceptions_enable=False,
        rich_markup_mode=None,
    )
    app.callback()(_root)
    for name, (module_name, function, epilog) in COMMANDS.items():
        if only is not None and name != only:
            continue
        module = importlib.import_module(module_name)
        if function == "OPTIONS":
            from kvcheck.cli.options import typer_command

            command = typer_command(name, module.OPTIONS, module.run, module.DOC)
        else:
            command = getattr(module, function)
        app.command(name, epilog=getattr(module, epilog) if epilog else None)(command)
    return app
