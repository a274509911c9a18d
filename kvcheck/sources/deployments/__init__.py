"""Published deployments as their authors keep them -> ``Deployment`` (instances, routers).

Readers for Kubernetes manifests (Deployment, StatefulSet, Job, LeaderWorkerSet, Dynamo
DynamoGraphDeployment, RBG RoleBasedGroup, OME ClusterServingRuntime/ServingRuntime,
llm-d, AIBrix StormService), srt-slurm recipes and shell scripts / docs blocks. Each
reader finds SGLang launch lines, resolves variables, and returns ``Instance`` objects
(``kvcheck.sources.deployments.instance``); the cluster pipeline (``kvcheck.cluster``)
groups them into classes and decides each prefill class x decode class pair once.
"""
