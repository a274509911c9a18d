"""Dynamo SDK graph configs (Dynamo 0.1-0.3, before the DynamoGraphDeployment CRD):
``dynamo serve graphs.disagg:Frontend -f disagg.yaml``.

The file maps each service class to its settings; an SGLang worker's settings are SGLang
server flags written as keys (``model-path: X``, ``tp: 2``, ``disaggregation-mode:
prefill``) beside ``ServiceArgs`` (``workers``: copies, ``resources.gpu``: GPUs each).
The SDK turned a service's keys into ``--key value`` arguments for SGLang's parser (a
``true`` boolean becomes the bare ``--key``, ``false`` is left out, a list gives its
items), which is restated here; each argument is located at its key's line.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

from kvcheck.sources.deployments.instance import Deployment, Location
from kvcheck.sources.deployments.launch import DYNAMO_MODULE, Launch, instance_from_launch
from kvcheck.sources.deployments.shell import Word
from kvcheck.sources.deployments.yamlnodes import LMap, sub_map

_MODE_KEYS = ("disaggregation-mode", "disaggregation_mode")


def is_graph_config(doc: Any) -> bool:
    """A mapping whose service sections hold SGLang's ``disaggregation-mode`` key."""
    return isinstance(doc, dict) and any(isinstance(v, dict) and any(k in v for k in _MODE_KEYS) for v in doc.values())


def _argv(section: dict[str, Any], file: str) -> list[Word]:
    words: list[Word] = []
    for key, value in section.items():
        if key == "ServiceArgs" or not isinstance(key, str):
            continue
        line = section.line_of(key) if isinstance(section, LMap) else 0
        flag = "--" + key.replace("_", "-")
        if isinstance(value, bool):
            if value:
                words.append(Word(flag, line, [], True))
            continue
        if value is None:
            continue
        items = value if isinstance(value, list) else [value]
        words.append(Word(flag, line, [], True))
        words.extend(Word(str(v), line, [], True) for v in items)
    return words


def read_graph_config(path: Path, doc: LMap) -> Deployment:
    file = str(path)
    dep = Deployment(name=path.name, source=Location(file, 1))
    for name, section in doc.items():
        if not isinstance(section, dict) or not any(k in section for k in _MODE_KEYS):
            continue
        sargs = sub_map(section, "ServiceArgs")
        res = sub_map(sargs, "resources")
        workers = sargs.get("workers")
        gpus = res.get("gpu")
        line = getattr(section, "line", 0) or (doc.line_of(name) if isinstance(doc, LMap) else 0)
        launch = Launch("server", DYNAMO_MODULE, _argv(section, file), line)
        inst, problem = instance_from_launch(
            launch,
            file=file,
            name=str(name),
            kind="dynamo-sdk",
            replicas=workers if isinstance(workers, int) and workers > 0 else 1,
            gpus=int(gpus) if isinstance(gpus, int) or (isinstance(gpus, str) and gpus.isdigit()) else None,
        )
        if problem:
            dep.problems.append(problem)
        if inst is not None:
            dep.instances.append(inst)
    return dep
