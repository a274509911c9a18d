"""What the command line adds to the deployments (``ClusterOptions``), and the caches one
``check_deployments`` run shares between its stages (``Caches``)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any


@dataclass
class ClusterOptions:
    """What the command line adds to the deployments.

    ``model_config``: one config.json for every instance (``--model-config``);
    ``models_dir``: a Hugging Face cache folder (``--models``); ``sglang_version``: the
    release every instance runs (overrides image tags); ``gpu``/``prefill_gpu``/
    ``decode_gpu``: GPU names that override the manifests'; ``prefill_sglang_version``/
    ``decode_sglang_version``: per-role releases (override ``sglang_version``); ``kernel``/``ignore``: as for
    ``run_preflight``; ``allow_unchecked``: exit 0 instead of 4 on ``unchecked``;
    ``environ``: where ``HF_HOME``/``HF_HUB_CACHE`` are read (default ``os.environ``);
    ``prefill_env``/``decode_env``: variables (``--prefill-env``/``--decode-env`` files)
    set on every instance of that role, over the manifest's; ``prefill_model_config``/
    ``decode_model_config``/``draft_model_config``: per-role config.json files (override
    ``model_config``).
    """

    model_config: Path | None = None
    models_dir: Path | None = None
    sglang_version: str | None = None
    prefill_sglang_version: str | None = None
    decode_sglang_version: str | None = None
    gpu: str | None = None
    prefill_gpu: str | None = None
    decode_gpu: str | None = None
    kernel: str = "builtin"
    ignore: tuple[str, ...] = ()
    allow_unchecked: bool = False
    environ: Mapping[str, str] | None = None
    prefill_env: Mapping[str, str] | None = None
    decode_env: Mapping[str, str] | None = None
    prefill_model_config: Path | None = None
    decode_model_config: Path | None = None
    draft_model_config: Path | None = None


@dataclass
class Caches:
    """Per-run caches: argv parsed per release (``flags``, ``parsed``), models per name."""

    argv: dict[tuple, Any] = field(default_factory=dict)
    parsed: dict[tuple, Any] = field(default_factory=dict)
    flags: dict[tuple, Any] = field(default_factory=dict)
    models: dict[tuple, Any] = field(default_factory=dict)
    parsed_models: dict[Any, Any] = field(default_factory=dict)
