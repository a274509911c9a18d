"""Options that several commands declare alike, as typer ``Annotated`` types.

A command writes ``sglang_version: PrefillSglangVersion = None``; the option's flag, metavar
and help live here once. Options whose help differs per command stay in the command.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Annotated, Any

import typer


def seconds(value: float) -> float:
    """Validate a duration option: a finite number of seconds, above 0 and at most a day."""
    if value is not None and not (math.isfinite(value) and 0 < value <= 86400):
        raise typer.BadParameter(f"{value} is not a number of seconds between 0 (excluded) and 86400")
    return value


PrefillSglangVersion = Annotated[
    str | None,
    typer.Option(
        "--prefill-sglang-version",
        metavar="VERSION",
        help="The prefill's SGLang release (overrides --sglang-version).",
    ),
]
DecodeSglangVersion = Annotated[
    str | None,
    typer.Option(
        "--decode-sglang-version",
        metavar="VERSION",
        help="The decode's SGLang release (overrides --sglang-version).",
    ),
]
PairModelConfig = Annotated[
    Path | None,
    typer.Option(
        "--model-config",
        help="The model's config.json (or its directory), for both sides: over the model-path lookup (a local "
        "directory, a Hugging Face cache, kvcheck's catalog of public configs).",
    ),
]


# ``--api-key``'s metavar: every output line passes through the secret scrubber, which
# replaces the word after a secret flag with ``<redacted>`` (``sources.redact.REDACTED``);
# a metavar of that very text is left as it is, so the help's columns stay aligned
API_KEY_METAVAR = "<redacted>"


def api_key_option(help: str) -> typer.models.OptionInfo:
    """``--api-key`` (also read from ``KVCHECK_API_KEY``, never shown as a default)."""
    return typer.Option(
        "--api-key",
        envvar="KVCHECK_API_KEY",
        show_default=False,
        show_envvar=True,
        metavar=API_KEY_METAVAR,
        help=help,
    )


def seconds_option(flag: str, help: str) -> typer.models.OptionInfo:
    """A duration in seconds (``seconds``: finite, above 0, at most a day)."""
    return typer.Option(flag, callback=seconds, help=help)


def limit_option(flag: str, help: str) -> typer.models.OptionInfo:
    """One of preflight's input caps (``kvcheck.sources.limits.set_caps``)."""
    return typer.Option(flag, metavar="N", help=help)


def typer_command(name: str, options: Sequence[Any], run: Callable[..., Any], doc: str) -> Callable[..., Any]:
    """A typer command function for a command whose options are declared without typer
    (``kvcheck.cli.preflight.Opt``): one parameter per option, in order, with its flags,
    help, metavar, environment variable and ``seconds`` validation, calling ``run``
    with every option by name. ``doc`` is the command's help."""
    import inspect

    kinds: dict[str, Any] = {
        "str": str,
        "path": Path,
        "int": int,
        "float": float,
        "bool": bool,
        "strs": list[str],
        "paths": list[Path],
    }
    params = []
    annotations: dict[str, Any] = {}
    for opt in options:
        annotation = kinds[opt.kind] if opt.default is not None else kinds[opt.kind] | None
        extra: dict[str, Any] = {}
        if opt.metavar:
            extra["metavar"] = opt.metavar
        if opt.envvar:
            extra["envvar"] = opt.envvar
        if not opt.show_default:
            extra["show_default"] = False
        if opt.seconds:
            extra["callback"] = seconds
        default = list(opt.default) if isinstance(opt.default, list) else opt.default
        info = typer.Option(default, *opt.decls, help=opt.help, **extra)
        params.append(
            inspect.Parameter(opt.name, inspect.Parameter.POSITIONAL_OR_KEYWORD, default=info, annotation=annotation)
        )
        annotations[opt.name] = annotation

    def command(**kwargs: Any) -> None:
        run(**kwargs)

    command.__signature__ = inspect.Signature(params)  # type: ignore[attr-defined]
    command.__annotations__ = annotations
    command.__doc__ = doc
    command.__name__ = command.__qualname__ = name
    return command
