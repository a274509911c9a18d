"""The GPU a side runs on, as far as SGLang's decisions depend on it.

SGLang reads the device's compute capability (``torch.cuda.get_device_capability()``,
through ``is_sm90_supported``/``is_sm100_supported``/``is_blackwell`` in
``sglang.srt.utils``) to choose attention and DSA backends, page sizes and KV dtypes.
kvcheck cannot see the GPU before the server starts, so the user names it (``--gpu``,
``--prefill-gpu``/``--decode-gpu``, a ``kvcheck-gpu:`` key in the YAML, or the manifest);
the default is Hopper (sm90), and the output says it was assumed.
"""

from __future__ import annotations

from dataclasses import dataclass

from kvcheck.errors import InputError


@dataclass(frozen=True)
class Gpu:
    """A GPU kind: ``name`` (e.g. ``h100``), compute capability ``(major, minor)``, and
    ``vendor`` (``nvidia`` or ``amd``)."""

    name: str
    capability: tuple[int, int]
    vendor: str = "nvidia"

    @property
    def sm(self) -> int:
        """SM version as SGLang compares it: major * 10 + minor (90 Hopper, 100 B200)."""
        return self.capability[0] * 10 + self.capability[1]

    @property
    def is_hopper(self) -> bool:
        return self.vendor == "nvidia" and self.capability[0] == 9

    @property
    def is_blackwell(self) -> bool:
        """``sglang.srt.utils.is_blackwell``-like: SM 10.x or 12.x data-centre/consumer."""
        return self.vendor == "nvidia" and self.capability[0] in (10, 11, 12)

    @property
    def is_sm100(self) -> bool:
        """``is_sm100_supported``: capability major 10 (B200/GB200/B300/GB300)."""
        return self.vendor == "nvidia" and self.capability[0] == 10


# Names people use (manifests, srt-slurm gpu_type, node labels) -> GPU kind.
_GPUS = {
    "a100": ((8, 0), "nvidia"),
    "a10": ((8, 6), "nvidia"),
    "a10g": ((8, 6), "nvidia"),
    "l4": ((8, 9), "nvidia"),
    "l40": ((8, 9), "nvidia"),
    "l40s": ((8, 9), "nvidia"),
    "h100": ((9, 0), "nvidia"),
    "h800": ((9, 0), "nvidia"),
    "h200": ((9, 0), "nvidia"),
    "h20": ((9, 0), "nvidia"),
    "gh200": ((9, 0), "nvidia"),
    "b200": ((10, 0), "nvidia"),
    "gb200": ((10, 0), "nvidia"),
    "b300": ((10, 3), "nvidia"),
    "gb300": ((10, 3), "nvidia"),
    "rtx5090": ((12, 0), "nvidia"),
    "rtxpro6000": ((12, 0), "nvidia"),
    "mi300x": ((9, 4), "amd"),
    "mi325x": ((9, 4), "amd"),
    "mi355x": ((9, 5), "amd"),
}
DEFAULT_GPU = "h100"


def known_gpus() -> list[str]:
    """Every GPU name kvcheck accepts (besides ``smNN``)."""
    return sorted(_GPUS)


def normalize_gpu_name(text: str) -> str | None:
    """A GPU name as people write it -> kvcheck's name, or None when unknown.

    Accepts ``H100``, ``nvidia-h100-80gb-hbm3``, ``NVIDIA-H200``, ``gb200``, ``sm90``,
    ``sm_100``. Longer names win (``gb200`` before ``b200``, ``h200`` before ``h20``). A text
    naming two GPUs (``h100,b200``) is None: it was read as its first match, and a verdict
    rested on that one GPU.
    """
    t = text.strip().lower().replace("_", "").replace(" ", "")
    if t.startswith("sm") and t[2:].isdigit():
        return f"sm{int(t[2:])}"
    flat = t.replace("-", "")
    found: list[str] = []
    for name in sorted(_GPUS, key=len, reverse=True):
        if name in flat:
            found.append(name)
            flat = flat.replace(name, "|")  # gb200 is not also b200, h200 not also h20
    # two GPUs in one name ("h100,b200", "a100-or-h100"): no one GPU; the caller says so
    return found[0] if len(set(found)) == 1 else None


def resolve_gpu(text: str | None, *, source: str = "", field: str = "--gpu") -> Gpu:
    """The ``Gpu`` for a name (``None`` -> the Hopper default).

    Raises ``InputError`` (exit 2) naming the field when the name is not a GPU kvcheck
    knows, with the list of known names.
    """
    name = normalize_gpu_name(text) if text is not None else DEFAULT_GPU
    if name is None:
        raise InputError(
            f"unknown GPU {text!r}; use one of {', '.join(known_gpus())} or smNN (e.g. sm90, sm100)",
            source=source or None,
            field=field,
        )
    if name.startswith("sm"):
        sm = int(name[2:])
        if not 70 <= sm <= 130:
            raise InputError(
                f"unknown GPU {text!r}: SM version {sm} is out of range (70..130)", source=source or None, field=field
            )
        return Gpu(name=name, capability=(sm // 10, sm % 10))
    cap, vendor = _GPUS[name]
    return Gpu(name=name, capability=cap, vendor=vendor)
