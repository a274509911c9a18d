"""A lab of real hosts for the fabric tests and benchmark: network namespaces on one bridge.

Each node is a network namespace ``kvf<tag>n<i>`` whose ``eth0`` (a veth whose other end
``kvf<tag>h<i>`` sits on the bridge ``kvf<tag>br``) has ``10.213.<net>.<10+i>/24``; the
bridge itself has ``10.213.<net>.1`` in the root namespace, where etcd and the
coordinator run. Nothing is routed: the namespaces have no default route, the root
namespace only the connected /24 on the bridge. ``close()`` deletes everything it made.

Faults: ``shape(i, peer, netem)`` puts ``tc netem`` (delay, rate, loss) on node i's egress
to one peer only (prio qdisc + u32 filter on the peer's address), ``drop(i, peer)`` drops
that pair's traffic (iptables in node i's namespace, else a tc drop filter),
``link_down(i)`` takes a node's link down.
"""

from __future__ import annotations

import os
import shutil
import subprocess


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=20)


def lab_unavailable() -> str | None:
    """Why namespaces cannot be used here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (ip netns, veth, bridge, tc)"
    for tool in ("ip", "tc"):
        if shutil.which(tool) is None:
            return f"{tool} (iproute2) is not installed"
    probe = f"kvfprobe{os.getpid() % 10000}"
    r = _run("ip", "netns", "add", probe, check=False)
    if r.returncode != 0:
        return f"cannot create a network namespace: {r.stderr.strip()}"
    _run("ip", "netns", "del", probe, check=False)
    return None


class Lab:
    """``n`` namespaced hosts on one bridge. ``ips[i]``, ``ns[i]``, ``prefix(i)``."""

    def __init__(self, n: int, *, net: int | None = None, ifname: dict[int, str] | None = None):
        self.tag = f"{os.getpid() % 100000}"
        self.net = net if net is not None else 100 + os.getpid() % 100
        self.bridge = f"kvf{self.tag}br"
        self.gateway = f"10.213.{self.net}.1"
        self.ns: list[str] = []
        self.ips: list[str] = []
        self.hostif: list[str] = []
        self.ifnames: list[str] = []
        try:
            _run("ip", "link", "add", self.bridge, "type", "bridge")
            _run("ip", "addr", "add", f"{self.gateway}/24", "dev", self.bridge)
            _run("ip", "link", "set", self.bridge, "up")
            for i in range(n):
                self._add(i, (ifname or {}).get(i, "eth0"))
        except Exception:
            self.close()
            raise

    def _add(self, i: int, ifname: str) -> None:
        ns, host, ip = f"kvf{self.tag}n{i}", f"kvf{self.tag}h{i}", f"10.213.{self.net}.{10 + i}"
        _run("ip", "netns", "add", ns)
        self.ns.append(ns)
        _run("ip", "link", "add", host, "type", "veth", "peer", "name", f"kvf{self.tag}p{i}")
        self.hostif.append(host)
        _run("ip", "link", "set", f"kvf{self.tag}p{i}", "netns", ns)
        _run("ip", "-n", ns, "link", "set", f"kvf{self.tag}p{i}", "name", ifname)
        _run("ip", "-n", ns, "addr", "add", f"{ip}/24", "dev", ifname)
        _run("ip", "-n", ns, "link", "set", ifname, "up")
        _run("ip", "-n", ns, "link", "set", "lo", "up")
        _run("ip", "link", "set", host, "master", self.bridge)
        _run("ip", "link", "set", host, "up")
        self.ips.append(ip)
        self.ifnames.append(ifname)

    def prefix(self, i: int) -> list[str]:
        """The command prefix that runs a process on node ``i``."""
        return ["ip", "netns", "exec", self.ns[i]]

    def shape(self, i: int, peer: int, netem: str) -> None:
        """``tc netem`` (e.g. ``delay 40ms``, ``rate 20mbit``, ``loss 30%``) on node i's
        traffic to node ``peer`` only."""
        dev = self.ifnames[i]
        ns = self.ns[i]
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "prio", "bands", "3",
             "priomap", *(["1"] * 16))
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "parent", "1:3", "handle", "30:", "netem", *netem.split())
        _run("ip", "netns", "exec", ns, "tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
             "match", "ip", "dst", f"{self.ips[peer]}/32", "flowid", "1:3")

    def drop(self, i: int, peer: int) -> None:
        """Drop every packet between node i and node ``peer`` (both directions, in node i)."""
        ns = self.ns[i]
        if shutil.which("iptables"):
            for chain, flag in (("OUTPUT", "-d"), ("INPUT", "-s")):
                _run("ip", "netns", "exec", ns, "iptables", "-A", chain, flag, self.ips[peer], "-j", "DROP")
            return
        dev = self.ifnames[i]
        _run("ip", "netns", "exec", ns, "tc", "qdisc", "replace", "dev", dev, "root", "handle", "1:", "prio")
        _run("ip", "netns", "exec", ns, "tc", "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
             "match", "ip", "dst", f"{self.ips[peer]}/32", "action", "drop")

    def link_down(self, i: int) -> None:
        _run("ip", "link", "set", self.hostif[i], "down")

    def close(self) -> None:
        for ns in self.ns:
            _run("ip", "netns", "pids", ns, check=False)
            pids = _run("ip", "netns", "pids", ns, check=False).stdout.split()
            for pid in pids:
                try:
                    os.kill(int(pid), 9)
                except (ProcessLookupError, ValueError):
                    pass
            _run("ip", "netns", "del", ns, check=False)
        for h in self.hostif:
            _run("ip", "link", "del", h, check=False)
        _run("ip", "link", "del", self.bridge, check=False)
        self.ns, self.hostif = [], []
