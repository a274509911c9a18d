"""Check a whole deployment: every prefill and decode instance, grouped into classes,
every prefill class x decode class pair decided once, plus cluster-wide checks.

``check_deployments(deployments, ClusterOptions(...)) -> ClusterReport`` (pipeline.py);
the checks a pair cannot see are in checks.py; the report and its JSON in model.py.
"""

from kvcheck.cluster.model import ClusterReport, DeploymentResult, PairResult
from kvcheck.cluster.pipeline import ClusterOptions, check_deployments

__all__ = ["ClusterOptions", "ClusterReport", "DeploymentResult", "PairResult", "check_deployments"]
