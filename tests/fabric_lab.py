"""A lab of real hosts for the fabric tests and benchmark: network namespaces on one bridge.

Each node is a network namespace ``kvf<tag>n<i>`` whose ``eth0`` (a veth whose other end
``kvf<tag>h<i>`` sits on the bridge ``kvf<tag>br``) has ``10.213.<net>.<10+i>/24``; the
bridge itself has ``10.213.<net>.1`` in the root namespace, where etcd and the
coordinator run. Nothing is routed: the namespaces have no default route, the root
namespace only the connected /24 on the bridge. ``close()`` deletes everything it made.

Faults on one pair (node i's egress to one peer): ``shape(i, peer, rate=, netem=)`` (an
HTB class + u32 filter on the peer's address, ``tc netem`` under it where the kernel
has it), ``loss(i, peer, p)`` and ``drop(i, peer)`` (iptables in node i's namespace);
``link_down(i)`` takes a node's link down.
"""

from __future__ import annotations

import os
import shutil
import subprocess


def _run(*cmd: str, check: bool = True) -> subprocess.CompletedProcess:
    return subprocess.run(list(cmd), capture_output=True, text=True, check=check, timeout=20)


def has_netem() -> bool:
    """True when the kernel has sch_netem (some VM kernels ship only htb, tbf and pfifo)."""
    probe = f"kvfnetem{os.getpid() % 10000}"
    if _run("ip", "netns", "add", probe, check=False).returncode != 0:
        return False
    try:
        _run("ip", "-n", probe, "link", "set", "lo", "up", check=False)
        return _run("ip", "netns", "exec", probe, "tc", "qdisc", "add", "dev", "lo", "root", "netem", "delay", "1ms", check=False).returncode == 0
    finally:
        _run("ip", "netns", "del", probe, check=False)


def lab_unavailable() -> str | None:
    """Why namespaces cannot be used here (None when they can)."""
    if os.geteuid() != 0:
        return "needs root (ip netns, veth, bridge, tc)"
    for tool in ("ip", "tc", "iptables"):
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
        self._bands: dict[int, int] = {}
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

    def shape(self, i: int, peer: int, *, rate: str | None = None, netem: str | None = None) -> None:
        """Node i's traffic to node ``peer`` only: an HTB class at ``rate`` (e.g. ``8mbit``)
        and/or ``tc netem`` (``delay 40ms``; only where the kernel has sch_netem, see
        ``has_netem``) under it, selected by a u32 filter on the peer's address; every
        other packet takes the unshaped default class."""
        dev, ns = self.ifnames[i], self.ns[i]
        n = self._bands.setdefault(i, 0)
        tc = ["ip", "netns", "exec", ns, "tc"]
        if n == 0:
            _run(*tc, "qdisc", "replace", "dev", dev, "root", "handle", "1:", "htb", "default", "1", "r2q", "100000")
            _run(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", "1:1", "htb", "rate", "40gbit")
        cls = n + 2
        self._bands[i] = n + 1
        r = rate or "40gbit"
        _run(*tc, "class", "add", "dev", dev, "parent", "1:", "classid", f"1:{cls}", "htb", "rate", r, "ceil", r)
        if netem:
            _run(*tc, "qdisc", "add", "dev", dev, "parent", f"1:{cls}", "handle", f"{cls}0:", "netem", *netem.split())
        _run(*tc, "filter", "add", "dev", dev, "parent", "1:", "protocol", "ip", "prio", "1", "u32",
             "match", "ip", "dst", f"{self.ips[peer]}/32", "flowid", f"1:{cls}")

    def loss(self, i: int, peer: int, probability: float) -> None:
        """Lose that share of node i's packets to ``peer`` on the way (an iptables statistic
        match in the peer's INPUT chain: the sender sees no ACK and retransmits, as on a
        lossy wire; a drop in the sender's own OUTPUT chain would be reported to its TCP
        stack as a local error instead)."""
        _run("ip", "netns", "exec", self.ns[peer], "iptables", "-A", "INPUT", "-s", self.ips[i], "-m", "statistic", "--mode", "random",
             "--probability", str(probability), "-j", "DROP")

    def drop(self, i: int, peer: int) -> None:
        """Drop every packet between node i and node ``peer`` (iptables in node i)."""
        for chain, flag in (("OUTPUT", "-d"), ("INPUT", "-s")):
            _run("ip", "netns", "exec", self.ns[i], "iptables", "-A", chain, flag, self.ips[peer], "-j", "DROP")

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


def _unshape(self, i: int) -> None:
    self._bands.pop(i, None)
    _run("ip", "netns", "exec", self.ns[i], "tc", "qdisc", "del", "dev", self.ifnames[i], "root", check=False)


def _undrop(self, i: int, peer: int) -> None:
    _run("ip", "netns", "exec", self.ns[i], "iptables", "-F", "OUTPUT", check=False)
    _run("ip", "netns", "exec", self.ns[i], "iptables", "-F", "INPUT", check=False)


Lab.unshape = _unshape
Lab.undrop = _undrop
