"""The static preflight never imports NIXL (nor kvcheck's NIXL code); ``agent`` needs a TTL."""

from __future__ import annotations

import subprocess
import sys

from tests.nixl_helpers import REPO, UNIFORM, write_pair


def test_static_preflight_does_not_import_nixl(tmp_path):
    p, d = write_pair(tmp_path, *UNIFORM)
    code = (
        "import sys\n"
        "from kvcheck.cli import main\n"
        f"sys.argv = ['kvcheck', 'preflight', '--prefill', {str(p)!r}, '--decode', {str(d)!r}, '--format', 'json', '--kernel', 'builtin']\n"
        "try:\n    main()\nexcept SystemExit:\n    pass\n"
        "bad = sorted(m for m in sys.modules if m.split('.')[0] in ('nixl', 'nixl_cu12', 'nixl_cu13', 'torch', 'numpy') or m.startswith('kvcheck.nixl'))\n"
        "print('IMPORTED', bad, file=sys.stderr)\n"
    )
    proc = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, cwd=REPO, timeout=60)
    assert '"verdict": "pass"' in proc.stdout, proc.stderr
    assert "IMPORTED []" in proc.stderr, proc.stderr
