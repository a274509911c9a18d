"""Published deployments as their authors keep them -> ``Deployment`` (instances, routers).

Readers for Kubernetes manifests (Pod, Deployment, StatefulSet, Job, LeaderWorkerSet,
Dynamo DynamoGraphDeployment, RBG RoleBasedGroup, OME ClusterServingRuntime/ServingRuntime,
AIBrix StormService, and any other object or Helm values holding pod specs, llm-d's
included), srt-slurm recipes (sweeps and overrides), Docker Compose files, and shell
scripts / Markdown docs blocks (``reader``, ``kubernetes``, ``srtslurm``, ``compose``,
``scripts``; shared: ``launch``, ``launch_options``, ``addresses``, ``router``, ``shell``,
``variables``, ``yamlnodes``). Each
reader finds SGLang launch lines, resolves variables, and returns ``Instance`` objects
(``kvcheck.sources.deployments.instance``); the cluster pipeline (``kvcheck.cluster``)
groups them into classes and decides each prefill class x decode class pair once.

Entry point: ``read_deployments(paths, *, env=None) -> list[Deployment]``.
"""

from __future__ import annotations

from kvcheck.sources.deployments.instance import (
    Deployment,
    Instance,
    Location,
    Problem,
    Router,
    RouterPrefill,
    Unresolved,
)


def read_deployments(paths, *, env=None, config_files=None, helm_values=None, inherit_env=False):
    """See ``kvcheck.sources.deployments.reader.read_deployments`` (imported lazily)."""
    from kvcheck.sources.deployments.reader import read_deployments as _read

    return _read(paths, env=env, config_files=config_files, helm_values=helm_values, inherit_env=inherit_env)


__all__ = ["Deployment", "Instance", "Location", "Problem", "Router", "RouterPrefill", "Unresolved", "read_deployments"]
