"""Live Mooncake checks: kvcheck's own Mooncake ``TransferEngine`` agent (``agent``) and
the probe that writes along the planned transfers into it (``probe``)."""
