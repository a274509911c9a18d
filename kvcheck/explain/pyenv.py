"""General rules for the Python environment a traceback shows: an import that fails names
the package (missing, a broken install, a wheel for another CUDA major) or the shared
library the loader cannot find, and the project that library belongs to.
"""

from __future__ import annotations

import re

from kvcheck.explain.rulebase import GenericFinding

# a shared library a module needs is not on the host (``ImportError: libcudart.so.12: cannot open ...``)
_LIB_MISSING = re.compile(
    r"(?P<lib>(?<![\w.+-])[\w+-]+?\.so(?:\.(?P<major>\d+))?[\d.]*): cannot open shared object file"
)
# the project a shared library's name says it belongs to (a library no package names)
_LIB_OWNER = (
    (re.compile(r"^(?:ascend_transport|libtransfer_engine|libmooncake|libasio|libetcd)"), "mooncake"),
    (re.compile(r"^(?:libnixl|libplugin_|libserdes|libstream)"), "nixl"),
    (re.compile(r"^libuc[pstm]\b|^libuct_"), "ucx"),
    (re.compile(r"^(?:libibverbs|librdmacm|libmlx5|libefa)"), "rdma-core"),
    (re.compile(r"^libfabric"), "libfabric"),
    (re.compile(r"^(?:libascend|libhccl|libacl|libge_|libtorch_npu|libruntime)"), "the Ascend CANN toolkit"),
)
# the statement that imported it (the source line under a frame, or a REPL line)
_IMPORT_STMT = re.compile(r"^\s*(?:>>>\s*)?(?:from\s+(?P<a>[\w.]+)\s+import\b|import\s+(?P<b>[\w.]+))")
# an import that fails: the package is not installed in this interpreter's environment
_NO_MODULE = re.compile(r"No module named '(?P<mod>[\w.]+)'")
# the PyPI package of a module people import (where the names differ)
_PKG_OF = {
    "sgl_kernel": "sgl-kernel",
    "mooncake": "mooncake-transfer-engine",
    "flashinfer": "flashinfer-python",
    "deep_ep": "deep-ep",
    "vllm_ascend": "vllm-ascend",
    "tensorrt_llm": "tensorrt-llm",
    "mori": "mori",
    "nixl": "nixl",
    "lmcache": "lmcache",
    "ucx_py": "ucx-py",
}


def _library_missing(
    m: re.Match[str], mod: str, engine: str, where: str, tb_line: int, lineno: int, text: str
) -> GenericFinding:
    """``ImportError: libX.so.N: cannot open shared object file`` while importing ``mod``:
    the module's package was built against a library the host lacks; for the CUDA
    libraries, a wheel for another CUDA major."""
    lib, major = m.group("lib"), m.group("major")
    owner = next((o for rx, o in _LIB_OWNER if rx.search(lib)), "")
    if not mod and owner in ("mooncake", "nixl"):
        mod = owner
    top = mod.split(".")[0] if mod else ""
    pkg = _PKG_OF.get(top, top.replace("_", "-")) if top else ""
    cuda = bool(re.match(r"lib(?:cudart|cublas\w*|cufft|curand|cusparse|cusolver|nvrtc|nvJitLink|cuda)\b", lib))
    who = f"the package {pkg} (import {mod})" if pkg else "the module being imported"
    if cuda and major:
        fid = f"{top.replace('_', '-')}-cuda-major-wheel-mismatch" if top else "cuda-major-wheel-mismatch"
        cause = (
            f"{who} is a build for CUDA {major} (it links {lib}) and this host/image has no CUDA {major} runtime: "
            f"the wheel of another CUDA major was installed."
        )
        fix = f"Install the build of {pkg or 'the package'} for the CUDA major of the image (e.g. its -cu13 / cu12 "
        fix += "wheel or extra), or add the CUDA runtime it was built for."
    else:
        fid = "native-library-missing"
        of = f" ({owner}'s library)" if owner and owner != top else ""
        cause = (
            f"{who} needs {lib}{of}, which the dynamic loader cannot find: not installed, or installed in a "
            "directory that is not on the loader path (LD_LIBRARY_PATH / ldconfig)."
        )
        fix = f"Install the library that provides {lib} (or fix LD_LIBRARY_PATH) for {pkg or 'the module'}."
    return _env_finding(
        fid,
        f"import of {mod or 'a module'} fails: {lib} missing",
        engine if engine not in ("", "python") else (top or "python"),
        "shared libraries of an installed package",
        (tb_line, lineno, text),
        cause,
        [
            f"python -m pip show {pkg or '<package>'}  # which build (cu12 / cu13) is installed",
            "nvidia-smi; ls /usr/local/cuda*/lib64/libcudart.so*  # the CUDA the image has",
        ],
        fix,
    )


def _module_missing(mod: str, engine: str, where: str, tb_line: int, lineno: int, text: str) -> GenericFinding:
    """``No module named 'X'``: X's package is not installed for this interpreter (or,
    for a submodule of an installed package, the install is partial / for another platform)."""
    top = mod.split(".")[0]
    pkg = _PKG_OF.get(top, top.replace("_", "-"))
    sub = "." in mod and top in _PKG_OF
    who = engine if engine not in ("", "python") else "the process"
    if sub:
        cause = (
            f"{who} imports {mod}: the package {pkg} is there but its module {mod} is not — a partial install, "
            f"or a wheel built for another Python/CUDA (its compiled part missing)."
        )
        fix = f"Reinstall {pkg} for this interpreter and CUDA (pip install --force-reinstall {pkg})."
        fid = f"{top.replace('_', '-')}-install-broken"
    else:
        cause = (
            f"{who} imports {top} ({where}) and the package {pkg} is not installed in the Python environment "
            f"this process runs (or is installed for another interpreter / virtual env)."
        )
        fix = f"pip install {pkg} in the environment that runs the server (the same python -m pip)." + (
            " NIXL: pip install nixl (it pulls the wheel matching CUDA 12/13)." if top == "nixl" else ""
        )
        fid = f"{top.replace('_', '-')}-not-installed"
    return _env_finding(
        fid,
        f"module {mod} not found: {pkg} " + ("install broken" if sub else "not installed"),
        engine or "python",
        "Python environment (installed packages)",
        (tb_line, lineno, text),
        cause,
        [f"python -c 'import {mod}' with the server's interpreter", f"python -m pip show {pkg}; which python"],
        fix,
    )


def _env_finding(
    fid: str, title: str, engine: str, component: str, at: tuple[int, int, str], cause: str, checks: list[str], fix: str
) -> GenericFinding:
    """A start-up finding about the Python environment (a package or library missing or
    of another build), at (traceback line, exception line, its text)."""
    tb_line, lineno, text = at
    return GenericFinding(
        id=fid,
        title=title,
        engine=engine,
        line=tb_line,
        phase="startup",
        component=component,
        text=text[:300],
        lines=[tb_line, lineno] if lineno else [tb_line],
        cause=cause,
        checks=checks,
        fix=fix,
    )
