"""``kvcheck agent --backend mooncake``: one side's KV regions, registered with Mooncake's
own ``TransferEngine`` the way ``MooncakeKVManager.register_buffer_to_engine`` registers
them (one ``batch_register`` of every non-empty KV region; here ``--pages`` pages each), with
the metadata exchange the deployment uses (``P2PHANDSHAKE``, SGLang's; or an HTTP
metadata server / etcd URL given with ``--metadata-server``).

kvcheck's read-only HTTP listener (default 127.0.0.1 on a free port) answers:
- ``GET /kvcheck/mooncake``: the agent's magic, role, Mooncake session id, protocol asked
  and used, HCAs, and every region (index, address, bytes, item length, layer, part): what
  the probe confirms before writing;
- ``POST /kvcheck/mooncake/digest`` ``{"spans": [[region, offset, length], ...]}``: the
  SHA-256 of each span of its own regions (spans outside a region are refused), and whether
  the guard zones are intact. Nothing else is served; nothing the peers send is executed.
"""

from __future__ import annotations

import json
import os
import signal
import socket
import threading
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from kvcheck.errors import InputError
from kvcheck.mooncake.engine import MAGIC, Arena, start_engine

MAX_SPANS = 1 << 16
MAX_BODY = 8 << 20


class MooncakeAgent:
    def __init__(
        self,
        geometry,
        *,
        role: str,
        pages: int,
        protocol: str,
        device: str = "",
        metadata: str = "P2PHANDSHAKE",
        host: str = "127.0.0.1",
        name: str | None = None,
    ):
        self.geometry, self.role, self.pages = geometry, role, pages
        self.name = name or f"kvcheck-{role}-{socket.gethostname()}-{os.getpid()}"
        items = [r.item_len for r in geometry.regions]
        self.arena = Arena([x * pages for x in items], items)
        self.engine, self.session, self.info = start_engine(host, protocol, device, metadata)
        rc = self.arena.register(self.engine)
        if rc != 0:
            raise RuntimeError(f"Mooncake batch_register_memory of {len(items)} regions failed (ret={rc})")

    def describe(self) -> dict:
        g = self.geometry
        return {
            "magic": MAGIC,
            "name": self.name,
            "role": self.role,
            "session_id": self.session,
            **self.info,
            "pages": self.pages,
            "regions": [
                {
                    "index": r.index,
                    "addr": self.arena.addr(r.index),
                    "bytes": ar.nbytes,
                    "item_len": r.item_len,
                    "layer_id": r.layer_id,
                    "part": r.part,
                    "pool": r.pool,
                }
                for r, ar in zip(g.regions, self.arena.regions, strict=False)
            ],
        }

    def digests(self, spans) -> dict:
        if not isinstance(spans, list) or len(spans) > MAX_SPANS:
            raise ValueError("spans must be a list of at most 65536 [region, offset, length]")
        out = []
        for sp in spans:
            if not (isinstance(sp, list) and len(sp) == 3 and all(isinstance(x, int) for x in sp)) or not 0 <= sp[
                0
            ] < len(self.arena.regions):
                raise ValueError(f"bad span {sp!r}")
            out.append(self.arena.digest(*sp))
        return {"digests": out, "guards_intact": self.arena.guards_intact()}

    def close(self) -> None:
        self.arena.unregister(self.engine)


def _handler(agent: MooncakeAgent):
    class H(BaseHTTPRequestHandler):
        def log_message(self, *a):  # quiet
            pass

        def _send(self, code: int, body: dict) -> None:
            data = json.dumps(body).encode()
            self.send_response(code)
            self.send_header("Content-Type", "application/json")
            self.send_header("Content-Length", str(len(data)))
            self.end_headers()
            self.wfile.write(data)

        def do_GET(self):
            if self.path.split("?")[0] == "/kvcheck/mooncake":
                return self._send(200, agent.describe())
            self._send(404, {"error": "not found"})

        def do_POST(self):
            if self.path != "/kvcheck/mooncake/digest":
                return self._send(404, {"error": "not found"})
            n = int(self.headers.get("Content-Length") or 0)
            if not 0 < n <= MAX_BODY:
                return self._send(413, {"error": "body too large"})
            try:
                return self._send(200, agent.digests(json.loads(self.rfile.read(n)).get("spans")))
            except (ValueError, AttributeError) as exc:
                return self._send(400, {"error": str(exc)})

    return H


def run_agent(
    *,
    role: str,
    config: str,
    ttl,
    pages: int,
    listen: str | None,
    protocol: str | None,
    device: str | None,
    metadata: str | None,
    env_file=None,
    model_config=None,
    draft_model_config=None,
    name: str | None = None,
    max_memory_gib: float = 4.0,
    sglang_version: str | None = None,
    out=None,
) -> int:
    """Serve a Mooncake agent of ``role`` with ``config``'s geometry until ``ttl`` seconds
    (or SIGTERM/SIGINT). Prints ``{"event": "ready", ...}`` then ``{"event": "stopped"}``."""
    from kvcheck.nixl.agent import check_ttl
    from kvcheck.nixl.commands import check_agent_args, load_agent_side, parse_listen

    ttl = check_ttl(ttl)
    check_agent_args(role, name, pages, max_memory_gib, max_pages=1 << 16)
    side, geometry = load_agent_side(
        config,
        role,
        env_file=env_file,
        model_config=model_config,
        draft_model_config=draft_model_config,
        sglang_version=sglang_version,
    )
    total = sum(r.item_len for r in geometry.regions) * pages
    if total > max_memory_gib * 2**30:
        raise InputError(
            f"the agent would allocate {total / 2**30:.2f} GiB (> --max-memory {max_memory_gib:g}); lower --pages",
            field="--pages",
        )
    proto = (protocol or side.env.get("MOONCAKE_PROTOCOL") or "rdma").lower()
    dev = (
        ""
        if side.env.get("MC_FORCE_TCP") == "1"
        else (device if device is not None else (side.args.disaggregation_ib_device or ""))
    )
    if dev.strip().startswith("{") or dev.strip().endswith(".json"):
        raise InputError(
            "--ib-device: give the device list of this agent's GPU (the per-GPU JSON mapping is the server's)",
            field="--ib-device",
        )
    host, port = parse_listen(listen) if listen else ("127.0.0.1", 0)
    if out is None:
        from kvcheck.nixl.runtime import json_channel

        out = json_channel()
    agent = MooncakeAgent(
        geometry,
        role=role,
        pages=pages,
        protocol=proto,
        device=dev,
        metadata=metadata or "P2PHANDSHAKE",
        host=host,
        name=name,
    )
    server = ThreadingHTTPServer((host, port), _handler(agent))
    server.timeout = 1.0
    threading.Thread(target=server.serve_forever, kwargs={"poll_interval": 0.2}, daemon=True).start()
    stop = threading.Event()
    for sig in (signal.SIGTERM, signal.SIGINT):
        signal.signal(sig, lambda *_: stop.set())
    d = agent.describe()
    out.write(
        json.dumps(
            {
                "event": "ready",
                "name": agent.name,
                "pid": os.getpid(),
                "listen": f"{host}:{server.server_address[1]}",
                "session_id": agent.session,
                "protocol_requested": d["protocol_requested"],
                "protocol": d["protocol"],
                "hcas": d["hcas"],
                "regions": len(d["regions"]),
                "bytes": agent.arena.size,
            }
        )
        + "\n"
    )
    out.flush()
    reason = "signal" if stop.wait(ttl) else "ttl"
    server.shutdown()
    agent.close()
    out.write(json.dumps({"event": "stopped", "reason": reason, "guards_intact": agent.arena.guards_intact()}) + "\n")
    out.flush()
    return 0
