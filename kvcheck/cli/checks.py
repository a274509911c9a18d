"""``kvcheck checks``: every check kvcheck runs, with what it catches, why and the fix."""

from __future__ import annotations

import typer

from kvcheck.errors import KvcheckError


def list_checks(check_id: str | None = typer.Argument(None, help="Show one check's documentation.")) -> None:
    """List every check (pair, start-up, cluster, live, and the pipeline's own findings): id, severity, what it
    catches, why the runtime breaks, the fix; with an ID, also an example input that makes kvcheck emit it."""
    from kvcheck.checks.ids import all_checks, find_check

    items = all_checks()
    if check_id:
        hit = find_check(check_id)
        if hit is None:
            raise KvcheckError(f"unknown check id {check_id!r}; run 'kvcheck checks' for the list")
        items = [hit]
        if hit["id"] != check_id:
            # a finding id another check emits: said as such before the check's own block
            # (whose severity, what and fix are the check's, not this finding's)
            from kvcheck.checks.examples import example_severity

            sev = example_severity(check_id)
            typer.echo(
                f"{check_id}{f' [{sev}]' if sev else ''}: a finding id of check {hit['id']} (documented below: the "
                f"severity, what, why and fix there are the check's; the finding's own message and fix say more)"
            )
    for chk in items:
        typer.echo(
            f"{chk['id']} [{chk['severity']}] {chk['title']}" + ("" if chk["scope"] == "pair" else f" ({chk['scope']})")
        )
        typer.echo(f"  what: {chk['what']}")
        typer.echo(f"  why:  {chk['why']}")
        if check_id:
            from kvcheck.checks.examples import example_lines

            for line in example_lines(check_id):
                typer.echo(line)
        typer.echo(f"  fix:  {chk['fix']}")
        if chk["finding_ids"]:
            typer.echo(f"  finding ids: {', '.join(chk['finding_ids'])}")
