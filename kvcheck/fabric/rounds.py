"""Rounds: the required pairs split so that no node is in two probes at once.

The required pairs form a bipartite graph (prefill nodes x decode nodes); a round is a
matching. By König's edge-colouring theorem a bipartite graph's edges split into exactly
``max degree`` matchings, so a full P x D matrix takes ``max(P, D)`` rounds (ClusterKit's
``n - 1`` rounds of ``n / 2`` pairs is the same idea on a complete graph). The colouring
below is the textbook alternating-path one: colour each edge with a colour free at both
ends, after swapping two colours along an alternating path when needed.
"""

from __future__ import annotations

from collections.abc import Hashable, Iterable
from typing import TypeVar

N = TypeVar("N", bound=Hashable)  # a node name


def schedule(pairs: Iterable[tuple[N, N]]) -> list[list[tuple[N, N]]]:
    """Split ``(prefill node, decode node)`` pairs into rounds (lists of pairs) in which
    every node appears at most once; ``max degree`` rounds. Deterministic for an input order."""
    edges = list(dict.fromkeys(pairs))
    at: dict[tuple[str, N], dict[int, tuple[str, N]]] = {}
    degree: dict[tuple[str, N], int] = {}
    for p, d in edges:
        for n in (("p", p), ("d", d)):
            degree[n] = degree.get(n, 0) + 1
            at.setdefault(n, {})
    colours = max(degree.values(), default=0)

    def free(node) -> int:
        used = at[node]
        return next(c for c in range(colours) if c not in used)

    for p, d in edges:
        u, v = ("p", p), ("d", d)
        a, b = free(u), free(v)
        if a not in at[v]:
            c = a
        else:
            # Swap a/b along the alternating path from v that starts with colour a; u is
            # never on it (bipartite), so afterwards a is free at both u and v.
            path, node, col = [], v, a
            while col in at[node]:
                nxt = at[node][col]
                path.append((node, nxt, col))
                node, col = nxt, (b if col == a else a)
            for x, y, col in path:
                del at[x][col]
                del at[y][col]
            for x, y, col in path:
                new = b if col == a else a
                at[x][new] = y
                at[y][new] = x
            c = a
        at[u][c] = v
        at[v][c] = u
    rounds: list[list[tuple[N, N]]] = [[] for _ in range(colours)]
    for (side, prefill_node), by_colour in at.items():
        if side != "p":
            continue
        for c, (_, other) in by_colour.items():
            rounds[c].append((prefill_node, other))
    order = {e: i for i, e in enumerate(edges)}
    return [sorted(r, key=order.__getitem__) for r in rounds if r]


def schedule_hosts(pairs: Iterable[tuple[N, N]], host_of) -> list[list[tuple[N, N]]]:
    """Rounds when several nodes share a host (several instances on one machine): no host
    in two probes at once (they would share its NICs). Greedy, busiest hosts first; a
    pair inside one host takes that host alone."""
    remaining = list(dict.fromkeys(pairs))
    rounds = []
    while remaining:
        load: dict = {}
        for p, d in remaining:
            for h in {host_of(p), host_of(d)}:
                load[h] = load.get(h, 0) + 1
        used: set = set()
        rnd, rest = [], []
        for pair in sorted(remaining, key=lambda e: -(load[host_of(e[0])] + load[host_of(e[1])])):
            hosts = {host_of(pair[0]), host_of(pair[1])}
            if hosts & used:
                rest.append(pair)
                continue
            used |= hosts
            rnd.append(pair)
        rounds.append(rnd)
        remaining = rest
    return rounds
