"""The cluster report: instances, classes, pairs and cluster-wide findings, per deployment.

``ClusterReport.contract()`` is the JSON object ``kvcheck preflight -f`` prints (README,
"Output contract"): ``verdict`` (pass | warn | unchecked | fail), ``instances``,
``classes``, ``pairs`` (each ``{prefill_class, decode_class, verdict, plan, findings}``),
``findings`` (cluster-wide), ``plan`` (the first failing pair's, else the first pair's, for
the single-pair contract), and ``deployments`` when several deployments (a sweep) were read.
"""

from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any

from kvcheck.checks.base import Finding, Severity
from kvcheck.report.model import Report, verdict_of
from kvcheck.sources.deployments.instance import Deployment, Instance, Location

VERDICT_ORDER = {"fail": 0, "unchecked": 1, "warn": 2, "pass": 3}
EMPTY_PLAN: dict[str, Any] = {"path": None, "n_src": 0, "n_dst": 0, "segments": []}


def worst(verdicts: list[str]) -> str:
    """The worst verdict of ``verdicts``: fail > unchecked > warn > pass (pass if empty)."""
    return min(verdicts, key=VERDICT_ORDER.__getitem__, default="pass")


@dataclass
class Located:
    """A finding and the manifest line it is about (``file=``/``line=`` of annotations)."""

    finding: Finding
    location: Location | None = None
    also: list[Location] = field(default_factory=list)

    @property
    def locations(self) -> list[Location]:
        """Every manifest line the finding is about, primary first."""
        return ([self.location] if self.location else []) + list(self.also)

    def contract(self) -> dict[str, Any]:
        out = self.finding.contract()
        out["file"] = self.location.file if self.location else None
        out["line"] = self.location.line if self.location else None
        out["locations"] = [str(loc) for loc in self.locations]
        return out


@dataclass
class InstanceResult:
    """One instance as the pipeline read it: parsed args (dest -> value), its class id,
    the SGLang release and model it was checked with, and instance-level findings."""

    instance: Instance
    args: dict[str, Any] | None = None
    class_id: str | None = None
    release: str | None = None
    release_source: str = ""
    model: str | None = None
    model_source: str = ""
    findings: list[Located] = field(default_factory=list)
    # ``args`` holds only what the launch line gives: the rest is in a --config file
    # kvcheck could not take (``Instance.args_hidden``). A dest absent from ``args`` is
    # then unknown, never SGLang's default (``known_arg``).
    args_partial: bool = False

    def known_arg(self, dest: str, default: Any = None) -> tuple[bool, Any]:
        """(whether ``dest``'s value is known, the value): a flag the line gives, else
        SGLang's ``default`` when every arg is known; (False, None) for an absent dest of
        an instance with ``args_partial`` or with no args read."""
        if self.args is None:
            return False, None
        if dest in self.args:
            return True, self.args[dest]
        return (False, None) if self.args_partial else (True, default)

    def contract(self) -> dict[str, Any]:
        inst = self.instance
        a = self.args or {}
        return {
            "role": inst.role,
            "name": inst.name,
            "location": str(inst.location),
            "file": inst.location.file,
            "line": inst.location.line,
            "class": self.class_id,
            "replicas": inst.replicas,
            "nodes": inst.nodes,
            "gpus": inst.gpus,
            "gpu_type": inst.gpu_type,
            "image": inst.image,
            "sglang_release": self.release,
            "release_source": self.release_source,
            "launcher": inst.launcher,
            "kind": getattr(inst, "kind", ""),
            "hosts": list(inst.hosts),
            "model": self.model,
            "model_source": self.model_source,
            "kv_args": kv_args(a),
        }


# Args shown per instance/class: the ones that shape KV regions, the transfer and bootstrap.
KV_ARG_DESTS = (
    "model_path",
    "tp_size",
    "dp_size",
    "enable_dp_attention",
    "attn_cp_size",
    "dcp_size",
    "pp_size",
    "page_size",
    "kv_cache_dtype",
    "disaggregation_transfer_backend",
    "disaggregation_bootstrap_port",
    "speculative_algorithm",
    "speculative_draft_model_path",
    "enable_hisparse",
    "attention_backend",
    "nnodes",
    "node_rank",
    "load_balance_method",
)


def kv_args(parsed: dict[str, Any]) -> dict[str, Any]:
    """The KV-relevant args of one parsed launch line, by ServerArgs field.

    Before 0.5.14 argparse stores ``--tp-size`` under ``tensor_parallel_size`` (and pp, dp,
    ep, attention CP, MoE DP likewise) and ``ServerArgs.from_cli_args`` renames them: the
    same renames (``kvcheck.sglang.flags.FROM_CLI_RENAMES``) apply here, so a 0.5.9 line's
    ``--tp-size 2`` shows as ``tp_size: 2`` as the runtime holds it."""
    from kvcheck.sglang.flags import FROM_CLI_RENAMES

    fields = dict(parsed)
    for dest, name in FROM_CLI_RENAMES.items():
        if dest in fields and name not in fields:
            fields[name] = fields.pop(dest)
    return {k: fields[k] for k in KV_ARG_DESTS if k in fields}


@dataclass
class ClassResult:
    """Instances whose KV-relevant inputs agree: decided once for every pair they are in.

    ``side`` is None when the class cannot be checked (unknown model, unresolved
    variable): every pair with it is ``unchecked``, with ``findings`` saying why."""

    id: str
    role: str
    key: Any
    members: list[InstanceResult] = field(default_factory=list)
    side: Any = None
    findings: list[Located] = field(default_factory=list)
    # The class's releases (``kvcheck.release.window.SideRelease``) and the side built for
    # any release of it (``side_for(release)``; ``side`` is the newest release's).
    window: Any = None
    build_for: Any = None
    _sides: dict[tuple, Any] = field(default_factory=dict)

    @property
    def first(self) -> InstanceResult:
        return self.members[0]

    def side_for(self, release: str, gpu: str | None = None) -> Any:
        """The class's ``Side`` on ``release`` (and on ``gpu`` when the class's GPU was
        assumed: a GPU window), built once per release and GPU."""
        if self.build_for is None or (gpu is None and self.side is not None and self.side.sglang_version == release):
            return self.side
        hit = self._sides.get((release, gpu))
        if hit is None:
            hit = self._sides[(release, gpu)] = self.build_for(release, gpu)
        return hit

    def contract(self) -> dict[str, Any]:
        f = self.first
        return {
            "id": self.id,
            "role": self.role,
            "instances": [m.instance.name for m in self.members],
            "replicas": sum(m.instance.replicas for m in self.members),
            "model": f.model,
            "model_source": f.model_source,
            "sglang_release": f.release,
            "releases": self.window.contract() if self.window is not None else None,
            "gpu": self.side.gpu if self.side is not None else f.instance.gpu_type,
            "gpu_source": self.side.gpu_source if self.side is not None else (f.instance.gpu_source or None),
            "kv_args": kv_args(f.args or {}),
            "checked": self.side is not None,
            "findings": [x.contract() for x in self.findings],
        }


@dataclass
class PairResult:
    """One prefill class x decode class pair, decided once."""

    prefill: ClassResult
    decode: ClassResult
    verdict: str
    report: Report | None
    findings: list[Located]
    # Which releases were decided, their outcome groups, and how each side's release was
    # found (``kvcheck.cluster.decide._releases_contract``).
    releases: dict[str, Any] | None = None

    def contract(self) -> dict[str, Any]:
        return {
            "prefill_class": self.prefill.id,
            "decode_class": self.decode.id,
            "verdict": self.verdict,
            "plan": plan_contract(self.report),
            "findings": [x.contract() for x in self.findings],
            "sides": [s.model_dump() for s in self.report.sides] if self.report else [],
            "releases": self.releases,
        }


def plan_contract(report: Report | None) -> dict[str, Any]:
    """The single-pair ``plan`` object (DESIGN.md part 3) of ``report``."""
    if report is None or report.plan is None:
        return dict(EMPTY_PLAN)
    plan = report.plan.contract()
    if report.plan.error is not None:
        plan["path"] = None
    return plan


@dataclass
class DeploymentResult:
    """One deployment checked: instances, classes, pairs and cluster-wide findings."""

    deployment: Deployment
    instances: list[InstanceResult]
    classes: list[ClassResult]
    pairs: list[PairResult]
    findings: list[Located]
    kernel: str = "builtin"

    @property
    def verdict(self) -> str:
        return worst([p.verdict for p in self.pairs] + [verdict_of([x.finding for x in self.findings])])

    def lead_pair(self) -> PairResult | None:
        """The first failing pair, else the first unchecked, else the first pair."""
        for v in ("fail", "unchecked"):
            for p in self.pairs:
                if p.verdict == v:
                    return p
        return self.pairs[0] if self.pairs else None

    def contract(self) -> dict[str, Any]:
        lead = self.lead_pair()
        d = self.deployment
        return {
            "name": d.name,
            "variant": d.variant,
            "source": str(d.source),
            "verdict": self.verdict,
            "plan": lead.contract()["plan"] if lead else dict(EMPTY_PLAN),
            "findings": [x.contract() for x in self.findings],
            "instances": [i.contract() for i in self.instances],
            "classes": [c.contract() for c in self.classes],
            "pairs": [p.contract() for p in self.pairs],
            "routers": [
                {
                    "location": str(r.location),
                    "prefills": [{"url": p.url, "bootstrap_port": p.bootstrap_port} for p in r.prefills],
                    "decodes": list(r.decodes),
                }
                for r in d.routers
            ],
        }


@dataclass
class ClusterReport:
    """Every deployment read from the ``-f`` files. ``allow_unchecked`` turns an
    ``unchecked`` verdict's exit status from 4 into 0 (the verdict stays ``unchecked``)."""

    deployments: list[DeploymentResult]
    kernel: str = "builtin"
    runtime: str = "sglang 0.5.23"
    allow_unchecked: bool = False

    @property
    def verdict(self) -> str:
        return worst([d.verdict for d in self.deployments])

    @property
    def exit_code(self) -> int:
        """0 pass/warn (and unchecked with ``allow_unchecked``), 1 fail, 4 unchecked."""
        v = self.verdict
        if v == "fail":
            return 1
        if v == "unchecked":
            return 0 if self.allow_unchecked else 4
        return 0

    def all_findings(self) -> list[tuple[str, Located]]:
        """(scope, finding) over every deployment: cluster findings, then each pair's."""
        out: list[tuple[str, Located]] = []
        multi = len(self.deployments) > 1
        for d in self.deployments:
            prefix = f"{d.deployment.variant or d.deployment.name}: " if multi else ""
            out += [(f"{prefix}cluster", x) for x in d.findings]
            for p in d.pairs:
                out += [(f"{prefix}{p.prefill.id} x {p.decode.id}", x) for x in p.findings]
        return out

    def contract(self) -> dict[str, Any]:
        """The JSON object of ``kvcheck preflight -f`` (see the module docstring)."""
        if len(self.deployments) == 1:
            out = self.deployments[0].contract()
            name = out.pop("name")
            out["deployment"] = name
        else:
            lead = next((d for d in self.deployments if d.verdict == self.verdict), self.deployments[0])
            deps = [d.contract() for d in self.deployments]
            tagged = lambda key: [{**item, "deployment": d["variant"] or d["name"]} for d in deps for item in d[key]]  # noqa: E731
            out = {
                "verdict": self.verdict,
                "plan": lead.contract()["plan"],
                "findings": tagged("findings"),
                "instances": tagged("instances"),
                "classes": tagged("classes"),
                "pairs": tagged("pairs"),
                "deployments": deps,
            }
        out["verdict"] = self.verdict
        out["exit_code"] = self.exit_code
        out["allow_unchecked"] = self.allow_unchecked
        out["kernel"] = self.kernel
        out["runtime"] = self.runtime
        return out


def finding(id: str, severity: Severity, message: str, fix: str, location: Location | None = None) -> Located:
    """A cluster-level finding at ``location``."""
    return Located(Finding(id=id, severity=severity, message=message, fix=fix), location)
