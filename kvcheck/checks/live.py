"""Checks on live sources: what a running server (or a snapshot of one) says beyond its
args. The comparisons are made when the side is read (``kvcheck.sources.live``, stored
as dicts in ``Side.live["findings"]``); these checks turn them into findings, so they can
be listed, documented and ignored by id like any other. Sides read from files have no
``live`` data and never produce these findings."""

from __future__ import annotations

from kvcheck.checks.base import CheckContext, Finding, Severity, check


def _from_live(chk, ctx: CheckContext) -> list[Finding]:
    out = []
    for side in (ctx.prefill, ctx.decode):
        for f in (side.live or {}).get("findings") or []:
            if f.get("id") == chk.id:
                out.append(
                    chk.finding(
                        f"{side.role}: {f['message']}",
                        fix=f.get("fix") or None,
                        severity=Severity(f.get("severity", chk.severity.value)),
                    )
                )
    return out


@check(
    "live-route",
    Severity.ERROR,
    "The prefill's bootstrap server reports what /server_info says",
    what="The bootstrap server's GET /route (what a decode reads first) disagrees with the prefill's /server_info: "
    "page size, kv-cache dtype string, attention TP/CP, DP, PP, KV sharding, or it was registered by another "
    "prefill (HTTP port). A warning when a snapshot holds no /route reply.",
    why="The decode checks page size and kv-cache dtype, and pairs ranks, with the bootstrap server's values; a plan "
    "made from /server_info then does not describe the transfer that will happen.",
    fix="Point disaggregation_bootstrap_port (or --bootstrap) at this prefill's own bootstrap server, make sure no "
    "other prefill registers there, and restart the prefill so its ranks register again.",
)
def live_route(chk, ctx: CheckContext) -> list[Finding]:
    return _from_live(chk, ctx)


@check(
    "live-role",
    Severity.WARNING,
    "A live server runs the role it was given",
    what="The server given as --prefill (or --decode) reports another disaggregation_mode in /server_info.",
    why="kvcheck checks each side in the role of its CLI position; the server will act in the role it runs.",
    fix="Swap the URLs, or start the server with the intended --disaggregation-mode.",
)
def live_role(chk, ctx: CheckContext) -> list[Finding]:
    return _from_live(chk, ctx)


@check(
    "live-version",
    Severity.WARNING,
    "A live server runs the SGLang version kvcheck models",
    what="/server_info reports an SGLang version other than the release kvcheck judged the server as: a version "
    "kvcheck does not model (a dev build, a newer release), judged as the modeled release --sglang-version names.",
    why="kvcheck restates each modeled release's decision code; the version the server runs may register other "
    "regions or raise other errors than the release it was judged as.",
    fix="Check this pair on a staging deployment running the release it was judged as, or run a release kvcheck "
    "models.",
)
def live_version(chk, ctx: CheckContext) -> list[Finding]:
    return _from_live(chk, ctx)


@check(
    "live-model",
    Severity.WARNING,
    "The model config read matches the served model",
    what="/model_info lists architectures that do not include the architecture of the config.json kvcheck read "
    "(--model-config for another model?).",
    why="Region geometry comes from the model config: a config for another model gives another plan than the server's.",
    fix="Pass the served model's own config.json with --model-config.",
)
def live_model(chk, ctx: CheckContext) -> list[Finding]:
    return _from_live(chk, ctx)
