"""A key written twice in one YAML mapping, as each consumer of the format treats it:
Kubernetes (kubectl's strict field validation) and Docker Compose refuse the file
(``refuse_duplicates``: exit 2 naming the file, line and key); PyYAML's ``safe_load``
(SGLang's ``--config`` merger, srt-slurm's recipe loader, Dynamo's graph config) and Helm's
values loader keep the later value (``warn_duplicates``: a ``duplicate-key`` warning, the
verdict on the value that runs).
"""

from __future__ import annotations

from kvcheck.errors import InputError
from kvcheck.sources.deployments.instance import Deployment
from kvcheck.sources.deployments.yamlnodes import Duplicate

# What each consumer of a YAML format does with a key written twice in one mapping.
KUBERNETES_STRICT = (
    "Kubernetes refuses a manifest with a duplicate field: kubectl apply (--validate=strict, its default) and the "
    "API server's strict field validation fail the request"
)
COMPOSE_STRICT = "Docker Compose refuses it (its YAML decoder: mapping key already defined)"
# srt-slurm's srtctl.core.config.load_config (NVIDIA/srt-slurm, 020fbc6c): yaml.safe_load
SRT_SLURM_LOADER = "srt-slurm's recipe loader (srtctl load_config: yaml.safe_load)"
PYYAML_LOADER = "a PyYAML loader (yaml.safe_load)"
HELM_LOADER = "Helm's values loader"


def refuse_duplicates(dups: list[Duplicate], file: str, consumer: str) -> None:
    """``InputError`` (exit 2) naming ``file``:line and the key of the first key written
    twice in one mapping, for a format whose consumer refuses it (``consumer`` says who)."""
    if not dups:
        return
    from kvcheck.sources.quoting import quoted

    d = dups[0]
    more = f" ({len(dups) - 1} more)" if len(dups) > 1 else ""
    raise InputError(
        f"line {d.again}: key {quoted(d.key)} is written twice in one mapping (first at line {d.first}){more}; "
        f"{consumer}. Keep one.",
        source=file,
    )


def warn_duplicates(deps: list[Deployment], dups: list[Duplicate], file: str, consumer: str) -> list[Deployment]:
    """A ``duplicate-key`` warning on each deployment read from a file whose consumer keeps
    the later of two values (as ``yaml.safe_load``): the verdict is on what runs."""
    if dups:
        from kvcheck.sources.deployments.sglang_config import duplicate_problems

        for dep in deps:
            dep.problems.extend(duplicate_problems(dups, file, consumer))
    return deps
