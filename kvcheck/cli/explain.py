"""``kvcheck explain``: a runtime message or a server log, explained (``kvcheck.explain``),
optionally pointed at the preflight finding that predicts it."""

from __future__ import annotations

import sys
from pathlib import Path
from typing import TYPE_CHECKING

import typer

from kvcheck.cli.options import DecodeSglangVersion, PairModelConfig, PrefillSglangVersion
from kvcheck.errors import KvcheckError

if TYPE_CHECKING:
    from kvcheck.sides import Role

EPILOG = (
    "Examples:\n\n"
    "  kvcheck preflight -f configs/deployments/llama-nixl-1p2d.yaml\n\n"
    "  kvcheck preflight -f prefill.yaml -f decode.yaml -o json --env prod.env --models ~/.cache/huggingface/hub\n\n"
    '  kvcheck explain "ValueError: NIXL KV transfer has no KV memory segments"\n\n'
    "  kvcheck explain --log prefill.log --prefill p.yaml --decode d.yaml\n\n"
    "  kubectl logs prefill-0 | kvcheck explain -o json\n\n"
    "  kvcheck explain --log decode.log -f deploy/pd.yaml\n\n"
    "Exit status: 0 something was explained (a catalog message, a known signature, or a general rule that reads "
    "the line's cause), 1 nothing was (lines only named as another engine's, UCX's, NIXL's... and not explained "
    "count as nothing: the output says 'not explained'), 2 bad input or usage (no message, unreadable log, configs "
    "that cannot be checked). With --prefill/--decode the exit status still says whether something was explained; "
    "the preflight's own verdict is in the output."
)


def explain(
    message: str | None = typer.Argument(
        None,
        help="The runtime message (e.g. the 'Type: message' line of a traceback). '-' or an existing file's path is "
        "read as --log. Without it and without --log, stdin is read as a log.",
    ),
    log: Path | None = typer.Option(
        None, "--log", "-l", help="A server log to scan: every known message, with counts and first/last line numbers."
    ),
    prefill: str | None = typer.Option(
        None,
        "--prefill",
        "-p",
        metavar="FILE|URL",
        help="Prefill server args, as preflight -p reads them (a --config YAML, a command-line file, JSON args, "
        "or a live server URL): run the preflight and point to the finding that causes the message.",
    ),
    decode: str | None = typer.Option(
        None, "--decode", "-d", metavar="FILE|URL", help="Decode server args, in any of the same forms."
    ),
    model_config: PairModelConfig = None,
    format: str = typer.Option(
        "table", "--format", "-o", metavar="table|json", help="Output: table (for people) or json (as preflight's -o)."
    ),
    files: list[Path] = typer.Option(
        [],
        "--file",
        "-f",
        metavar="FILE",
        help="The deployment the log came from, as preflight -f reads it (repeatable): its preflight runs and each "
        "message points to the finding and the config line to change. (-f table|json, the old spelling of -o, "
        "still works but is deprecated.)",
    ),
    list_all: bool = typer.Option(False, "--list", help="List every message kvcheck knows, then exit 0."),
    sglang_version: str | None = typer.Option(
        None,
        "--sglang-version",
        metavar="VERSION",
        help="The SGLang release the message came from: the explanation says whether the message exists and is "
        "reachable there. Default: the version the log shows, else the newest scanned release (said as "
        "assumed; never the SGLang installed here).",
    ),
    prefill_sglang_version: PrefillSglangVersion = None,
    decode_sglang_version: DecodeSglangVersion = None,
) -> None:
    """Explain a PD/KV-transfer failure from a pasted message or a whole log (SGLang up to 0.5.23, over NIXL or
    Mooncake, UCX/NIXL crashes; other engines' lines are named as theirs): the first cause and what followed, what it
    means per the runtime's code, the fix, and the preflight check that predicts it."""
    import json as _json

    from kvcheck.explain import attach_preflight, explain_text
    from kvcheck.explain.render import render_catalog, render_explanation

    deployment_files = []
    for f in files:
        if str(f) in ("table", "json") and not f.exists():
            typer.echo(
                f"kvcheck explain: -f {f} is deprecated for the output format: use -o {f} (or --format {f}); -f now "
                "names a deployment file, as for preflight",
                err=True,
            )
            format = str(f)
        else:
            deployment_files.append(f)
    if list_all:
        typer.echo(render_catalog(format))
        raise typer.Exit(0)
    if deployment_files and prefill is not None:
        raise KvcheckError("give -f FILE (the deployment) or --prefill/--decode (one pair), not both", field="-f")
    if format not in ("table", "json"):
        raise KvcheckError(f"unknown format {format!r}; choose table or json", field="--format")
    if (prefill is None) != (decode is None):
        raise KvcheckError("give both --prefill and --decode, or neither", field="--prefill/--decode")
    if message is not None and log is None and _names_a_log(message):
        # `cat x.log | kvcheck explain -` and `kvcheck explain x.log`: what the user means is the log,
        # not the one-word message "-" or "x.log" (said on stderr, so the output stays the log's)
        if message != "-":
            typer.echo(f"kvcheck explain: {message} is a file: reading it as --log {message}", err=True)
        log, message = Path(message), None
    if message is not None and log is not None:
        raise KvcheckError("give a MESSAGE or --log FILE, not both")
    if message is not None:
        if not message.strip():
            raise KvcheckError("nothing to explain: the message is empty")
        from kvcheck.sources.redact import scrubbed_text_lines

        # what it marks secret is never printed, nor read (a clipped line cannot leak a prefix)
        message = "\n".join(scrubbed_text_lines(message.splitlines()))
        result = explain_text(message, source="message", sglang_version=sglang_version)
    else:
        # A log is streamed line by line (linear time, bounded memory, long lines cut).
        from kvcheck.explain.matcher import VersionSniffer, annotate_release, explain_blocks, iter_log_blocks
        from kvcheck.explain.scan import open_log_text

        if log is not None:
            from kvcheck.sources.files import open_regular

            fh = open_regular(log)  # regular files only (O_NONBLOCK + fstat: a FIFO cannot block); '-' is stdin
            source = f"log {log}" if str(log) != "-" else "log <stdin>"
        else:
            if sys.stdin.isatty():
                raise KvcheckError("nothing to explain: give a MESSAGE, --log FILE, or pipe a log on stdin")
            fh, source = sys.stdin.buffer, "log <stdin>"
        try:
            # compressed logs read through, UTF-16/32 decoded, binary data refused (exit 2)
            text = open_log_text(fh, source)
            if sys.stderr.isatty():  # a person waits: say how far a large log has been read
                text = _Progress(text, source)
            sniffer = VersionSniffer(_registering_secrets(iter_log_blocks(text)))
            result = explain_blocks(sniffer, source=source)
        except OSError as exc:
            raise KvcheckError(f"cannot read log: {exc.strerror or exc}", source=source) from None
        finally:
            if log is not None:
                fh.close()
        if result.blank:
            raise KvcheckError(f"nothing to explain: the {source} is empty")
        annotate_release(result, sglang_version, sniffer.version)
    if prefill is not None and decode is not None:  # both or neither (checked above)
        # The same pipeline as ``preflight`` (one answer for one pair, on every path).
        from kvcheck.cluster import ClusterOptions
        from kvcheck.cluster.pair_input import run_pair
        from kvcheck.sources import load_side

        def load_live(spec: str, role: Role):
            return load_side(
                spec,
                role,
                model_config=model_config,
                sglang_version=(prefill_sglang_version if role == "prefill" else decode_sglang_version)
                or sglang_version,
            )

        opts = ClusterOptions(
            model_config=model_config,
            sglang_version=sglang_version,
            prefill_sglang_version=prefill_sglang_version,
            decode_sglang_version=decode_sglang_version,
        )
        report, _, _ = run_pair(prefill, decode, opts, load_live=load_live)
        attach_preflight(result, report)
        result.configs = {"prefill": prefill, "decode": decode}
    if deployment_files:
        from kvcheck.explain.matcher import attach_deployment_preflight

        try:
            from kvcheck.cluster import ClusterOptions, check_deployments
            from kvcheck.sources.deployments import read_deployments
        except ImportError:
            raise KvcheckError(
                "this kvcheck build has no deployment readers; use --prefill/--decode", field="-f"
            ) from None
        deployments = read_deployments(list(deployment_files))
        attach_deployment_preflight(
            result,
            check_deployments(deployments, ClusterOptions(model_config=model_config, sglang_version=sglang_version)),
        )
        result.configs = {f"file {i + 1}": str(f) for i, f in enumerate(deployment_files)}
    if format == "json":
        from kvcheck.sources.limits import escape_values

        # a log's escape sequences as visible text in every value (``jq -r`` prints them)
        typer.echo(_json.dumps(escape_values(result.contract()), indent=2))
    else:
        typer.echo(render_explanation(result))
    raise typer.Exit(result.exit_code)


# The exit status already decided when output is being written: a reader that closes


def _names_a_log(message: str) -> bool:
    """Whether the MESSAGE argument is a log rather than a runtime message: ``-`` (standard
    input, as ``--log -``) or one word that is the path of an existing file."""
    if message == "-":
        return True
    if not message or any(c.isspace() for c in message) or len(message) > 4096:
        return False
    try:
        return Path(message).is_file()
    except OSError:
        return False


def _registering_secrets(blocks):
    """``blocks`` (lists of a log's lines) as they are, each block's marked secret values
    registered and scrubbed out of the block before it is read (``scrubbed_text_lines``): the
    log's own ``api_key='X'``, ``--api-key X`` or ``HF_TOKEN=X`` never reaches the output,
    whichever line quotes it, not even as the prefix left when a reader clips the line."""
    from kvcheck.sources.redact import scrubbed_text_lines

    for block in blocks:
        yield scrubbed_text_lines(block)


class _Progress:
    """A log's ``read(n)`` source that writes, on a terminal's stderr and every
    ``EVERY_S`` seconds, how much of the log has been read (a 200 MB log takes minutes)."""

    EVERY_S = 10.0

    def __init__(self, stream, source: str):
        import time

        self._stream, self._source, self._read = stream, source, 0
        self._start = self._last = time.monotonic()

    def read(self, n: int = -1) -> bytes:
        import time

        data = self._stream.read(n)
        self._read += len(data)
        now = time.monotonic()
        if now - self._last >= self.EVERY_S:
            self._last = now
            sys.stderr.write(
                f"kvcheck explain: {self._read / (1 << 20):.0f} MiB of the {self._source} read "
                f"({now - self._start:.0f} s)\n"
            )
            sys.stderr.flush()
        return data
