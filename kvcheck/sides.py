"""A ``Side``: one server of the pair (prefill or decode) as kvcheck sees it.

Built by ``kvcheck.sources`` from a config file, a command line, JSON args or a live
server; consumed by ``kvcheck.sglang.geometry`` and the checks.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, Field

from kvcheck.sglang.args import ServerArgs
from kvcheck.sglang.model import ModelConfig

Role = Literal["prefill", "decode"]

# Environment variables that change how the runtime registers or moves KV over NIXL.
RELEVANT_ENV = (
    "SGLANG_DISAGGREGATION_NIXL_BACKEND",
    "SGLANG_DISAGGREGATION_NIXL_BACKEND_PARAMS",
    "SGLANG_PP_LAYER_PARTITION",
    "UCX_NET_DEVICES",
    "UCX_TLS",
    # Mooncake's transfer engine (read by MooncakeTransferEngine / mooncake.engine).
    "MOONCAKE_PROTOCOL",
    "MC_FORCE_TCP",
    "PYTORCH_CUDA_ALLOC_CONF",
    "PYTORCH_ALLOC_CONF",
)
KV_ENV_PREFIXES = ("SGLANG_", "UCX_", "NIXL_")


def kv_relevant_env(name: str) -> bool:
    """Whether a server's environment variable ``name`` is one a side keeps (and a pair's
    decision may read): ``RELEVANT_ENV``, or any ``SGLANG_``/``UCX_``/``NIXL_`` variable."""
    return name in RELEVANT_ENV or name.startswith(KV_ENV_PREFIXES)


class Side(BaseModel):
    """One server's resolved inputs.

    ``args``: the typed KV-shaping args; ``raw_args``: every flag given (dest -> value);
    ``env``: the variables in ``RELEVANT_ENV`` that were set; ``model``/``draft_model``:
    the target's and the draft's config (None when no separate draft model);
    ``origin``: where it came from (a path or URL) for messages.
    """

    role: Role
    args: ServerArgs
    raw_args: dict[str, Any] = Field(default_factory=dict)
    env: dict[str, str] = Field(default_factory=dict)
    model: ModelConfig
    draft_model: ModelConfig | None = None
    origin: str = ""
    live: dict[str, Any] | None = None
    # The SGLang release this side runs ("0.5.23"), and where that came from ("image tag
    # lmsysorg/sglang:v0.5.9", "--sglang-version", "installed", "default: newest modeled").
    sglang_version: str | None = None
    version_source: str = ""
    # The GPU this side runs on (a kvcheck GPU name such as "h100", "b200", or "sm90"),
    # and where that came from ("--gpu", "kvcheck-gpu", "manifest nodeSelector", "default").
    gpu: str | None = None
    gpu_source: str = ""
    # The container image the server runs, when the input names one (for the NIXL its image
    # ships: kvcheck.sglang.server_nixl; never the NIXL installed where kvcheck runs).
    image: str | None = None

    @property
    def label(self) -> str:
        return f"{self.role} ({self.origin})" if self.origin else self.role
