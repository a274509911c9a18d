"""Live NIXL checks: kvcheck's own agents, the metadata blob parser, the probe transfer.

Nothing here imports NIXL at module import time: ``kvcheck.nixl.runtime.load_nixl()`` is
called only by the commands that need a real agent. The static preflight path never
imports this package's NIXL-dependent parts.
"""
