"""PD router launch lines -> ``Router``, and each router URL linked to the instance it names.

Routers read: ``python -m sglang_router.launch_router --pd-disaggregation`` (``--prefill
URL [BOOTSTRAP_PORT]``, ``--decode URL``, ``--service-discovery``) and the older mini load
balancer (``sglang.srt.disaggregation.mini_lb`` / ``launch_lb``: ``--prefill-bootstrap-ports``
one per ``--prefill`` URL). ``link_router`` matches each URL's port, then its host, to an
``Instance`` (role-aware); a URL it cannot match unambiguously stays unlinked (None).
"""

from __future__ import annotations

from typing import TYPE_CHECKING
from urllib.parse import urlsplit

from kvcheck.sources.deployments.instance import Instance, Location, Router, RouterPrefill

if TYPE_CHECKING:
    from kvcheck.sources.deployments.launch import Launch


def router_from_launch(launch: Launch, *, file: str, name: str = "", image: str | None = None) -> Router | None:
    """A ``Router`` for a router launch with ``--pd-disaggregation`` (or the mini load
    balancer, PD by construction); None for a router that is not PD."""
    argv = [w.text for w in launch.args]
    pd = launch.launcher != "sglang_router.launch_router" or any(
        t == "--pd-disaggregation" or t.startswith("--pd-dis") for t in argv
    )
    if not pd:
        return None
    router = Router(location=Location(file, launch.line), argv=argv, name=name, image=image or launch.image)
    mini_ports: list[str] = []
    k = 0
    while k < len(argv):
        tok = argv[k]
        opt, eq, val = tok.partition("=")
        if opt in ("--prefill", "--prefill-url", "--prefill-urls"):
            urls: list[str] = [val] if eq else []
            k += 1
            while not eq and k < len(argv) and not argv[k].startswith("--"):
                urls.append(argv[k])
                k += 1
            # --prefill URL [BOOTSTRAP_PORT]: a bare port (or "none") follows its URL
            i = 0
            while i < len(urls):
                url = urls[i]
                bp = None
                if i + 1 < len(urls) and (urls[i + 1].isdigit() or urls[i + 1].lower() == "none"):
                    bp = int(urls[i + 1]) if urls[i + 1].isdigit() else None
                    i += 1
                router.prefills.append(RouterPrefill(url=url, bootstrap_port=bp))
                i += 1
            continue
        if opt in ("--decode", "--decode-url", "--decode-urls"):
            vals = [val] if eq else []
            k += 1
            while not eq and k < len(argv) and not argv[k].startswith("--"):
                vals.append(argv[k])
                k += 1
            router.decodes.extend(vals)
            continue
        if opt == "--prefill-bootstrap-ports":
            # the older mini load balancer: one port per --prefill URL, in order
            k += 1
            vals = [val] if eq else []
            while not eq and k < len(argv) and not argv[k].startswith("--"):
                vals.append(argv[k])
                k += 1
            mini_ports.extend(vals)
            continue
        if opt == "--service-discovery":
            router.service_discovery = True
        k += 1
    for p, port in zip(router.prefills, mini_ports, strict=False):
        if p.bootstrap_port is None and port.isdigit():
            p.bootstrap_port = int(port)
    return router


# -- linking and multi-node ----------------------------------------------------------


def _host_port(url: str) -> tuple[str, int | None]:
    try:
        parts = urlsplit(url if "://" in url else f"http://{url}")
    except ValueError:  # "http://${URLS[$i]}:8000": brackets that are no IPv6 address
        return "", None
    try:
        port = parts.port
    except ValueError:
        port = None
    if port is None:
        port = 443 if parts.scheme == "https" else 80
    return (parts.hostname or ""), port


_LOCAL = {"127.0.0.1", "localhost", "0.0.0.0", "::1", ""}


def link_router(router: Router, instances: list[Instance]) -> None:
    """Fill ``RouterPrefill.instance`` and ``Router.decode_instances`` by matching each
    URL's port to an instance's ``port`` (role-aware), then its host to the instance's
    hosts or name; left None when ambiguous or not found."""

    def pick(url: str, role: str) -> str | None:
        host, port = _host_port(url)
        cands = [i for i in instances if i.role == role and (i.port == port or i.port is None)]
        if not cands:
            return None
        label = host.split(".")[0]

        def names(i: Instance) -> list[str]:
            # a workload's DNS names start with its name: "pd-prefill-0.s-pd-prefill"
            # for RBG role "prefill" of group "pd"; a Service named like the Deployment
            parts = i.name.split("/")
            return ["-".join(parts[:k]) for k in range(len(parts), 0, -1)]

        by_host = [
            i
            for i in cands
            if host in i.hosts or (label and any(label.startswith(h.split(".")[0]) for h in i.hosts if h))
        ]
        if not by_host and label:
            # most specific name first: "pd-prefill-engine", then "pd-prefill", then "pd"
            for level in range(3):
                hit = [
                    i
                    for i in cands
                    if level < len(names(i)) and (label == names(i)[level] or label.startswith(names(i)[level] + "-"))
                ]
                if len(hit) == 1:
                    by_host = hit
                    break
        if len(by_host) == 1:
            return by_host[0].name
        if host in _LOCAL:
            local = [i for i in cands if not i.hosts or any(h in _LOCAL for h in i.hosts)]
            exact = [i for i in local if i.port == port]
            if len(exact) == 1:
                return exact[0].name
        exact = [i for i in cands if i.port == port]
        if len(exact) == 1:
            return exact[0].name
        if len(cands) == 1:
            return cands[0].name
        return None

    for p in router.prefills:
        p.instance = pick(p.url, "prefill")
    router.decode_instances = [pick(u, "decode") for u in router.decodes]
