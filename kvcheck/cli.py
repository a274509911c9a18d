"""The command line. Thin: parse options, call the library, render, exit.

Exit statuses: 0 pass (warnings allowed), 1 fail, 2 bad input or usage (nothing
checked), 3 a live source could not be reached in time.
"""

from __future__ import annotations

import sys
from pathlib import Path
from typing import List, Optional

import typer

from kvcheck.errors import EXIT_INPUT, KvcheckError

app = typer.Typer(
    name="kvcheck",
    help=(
        "Will your prefill and decode servers move KV cache over NIXL? kvcheck answers in "
        "milliseconds, before anything starts, with SGLang 0.5.23's own decision logic.\n\n"
        "Exit status: 0 pass (warnings allowed), 1 fail, 2 bad input or usage, 3 a live source "
        "could not be reached in time."
    ),
    no_args_is_help=True,
    add_completion=False,
    pretty_exceptions_enable=False,
    rich_markup_mode=None,
)

EPILOG = (
    "Examples:\n\n"
    "  kvcheck preflight --prefill configs/aligned/prefill.yaml --decode configs/aligned/decode.yaml\n\n"
    "  kvcheck preflight --prefill p.yaml --decode d.yaml --format json --ignore page-size-unpinned\n\n"
    "PREFILL/DECODE: a SGLang --config YAML (dash keys, as sglang.launch_server takes them), a file "
    "holding the launch command line, or a JSON object of args. The model's config.json is read from "
    "the model-path directory, or from --model-config FILE when model-path is a hub id."
)


@app.command(epilog=EPILOG)
def preflight(
    prefill: str = typer.Option(..., "--prefill", "-p", help="Prefill server args: --config YAML, command-line file, JSON args, or a live server URL."),
    decode: str = typer.Option(..., "--decode", "-d", help="Decode server args, in any of the same forms."),
    format: str = typer.Option("table", "--format", "-f", help="Output: table (for people), json (the documented contract)."),
    kernel: str = typer.Option("builtin", "--kernel", help="Decision code: builtin (kvcheck's restatement of SGLang 0.5.23, milliseconds), runtime (the installed SGLang's own code driven on CPU; imports torch, seconds), auto (runtime when SGLang is importable, else builtin)."),
    ignore: List[str] = typer.Option([], "--ignore", help="Accept a finding by check id (repeatable). Findings that predict a runtime error stay in the output, marked ignored."),
    prefill_env: Optional[Path] = typer.Option(None, "--prefill-env", help="VAR=value file with the prefill's environment (SGLANG_DISAGGREGATION_NIXL_BACKEND, SGLANG_PP_LAYER_PARTITION, UCX_NET_DEVICES, ...)."),
    decode_env: Optional[Path] = typer.Option(None, "--decode-env", help="VAR=value file with the decode's environment."),
    model_config: Optional[Path] = typer.Option(None, "--model-config", help="The model's config.json, for both sides, when model-path is a hub id."),
    prefill_model_config: Optional[Path] = typer.Option(None, "--prefill-model-config", help="The prefill's model config.json (overrides --model-config)."),
    decode_model_config: Optional[Path] = typer.Option(None, "--decode-model-config", help="The decode's model config.json (overrides --model-config)."),
    draft_model_config: Optional[Path] = typer.Option(None, "--draft-model-config", help="The draft model's config.json when speculative-draft-model-path is a hub id."),
) -> None:
    """Check a prefill/decode pair: KV regions, transfer path, and the exact runtime errors."""
    from kvcheck.preflight import run_preflight
    from kvcheck.report import render_json, render_terminal
    from kvcheck.sources import load_side

    if format not in ("table", "json"):
        raise KvcheckError(f"unknown format {format!r}; choose table or json", field="--format")
    p = load_side(prefill, "prefill", env_file=prefill_env, model_config=prefill_model_config or model_config, draft_model_config=draft_model_config)
    d = load_side(decode, "decode", env_file=decode_env, model_config=decode_model_config or model_config, draft_model_config=draft_model_config)
    report = run_preflight(p, d, kernel=kernel, ignore=ignore)
    if format == "json":
        sys.stdout.write(render_json(report) + "\n")
    else:
        from rich.console import Console

        render_terminal(report, Console())
    raise typer.Exit(report.exit_code)


@app.command("checks")
def list_checks(check_id: Optional[str] = typer.Argument(None, help="Show one check's documentation.")) -> None:
    """List every check: id, severity, what it catches, why the runtime breaks, the fix."""
    from kvcheck.checks import REGISTRY
    from kvcheck.preflight import FINDING_IDS

    items = REGISTRY.values()
    if check_id:
        from kvcheck.preflight import _check_of

        key = _check_of(check_id)
        if key not in REGISTRY:
            raise KvcheckError(f"unknown check id {check_id!r}; run 'kvcheck checks' for the list")
        items = [REGISTRY[key]]
    for chk in items:
        typer.echo(f"{chk.id} [{chk.severity.value}] {chk.title}")
        typer.echo(f"  what: {chk.what}")
        typer.echo(f"  why:  {chk.why}")
        typer.echo(f"  fix:  {chk.fix}")
        if chk.id in FINDING_IDS:
            typer.echo(f"  finding ids: {', '.join(FINDING_IDS[chk.id])}")


def main() -> None:
    """Entry point: run the app, turning kvcheck's own errors into one line and an exit status."""
    try:
        rc = app(standalone_mode=False)
    except KvcheckError as exc:
        typer.echo(f"kvcheck: error: {exc}", err=True)
        sys.exit(exc.exit_code)
    except typer.Exit as exc:
        sys.exit(exc.exit_code)
    except (typer.BadParameter, typer.Abort) as exc:  # pragma: no cover - click handles most
        typer.echo(f"kvcheck: error: {exc}", err=True)
        sys.exit(EXIT_INPUT)
    except Exception as exc:  # click usage errors
        import click

        if isinstance(exc, click.ClickException):
            exc.show()
            sys.exit(EXIT_INPUT)
        raise
    sys.exit(rc if isinstance(rc, int) else 0)
