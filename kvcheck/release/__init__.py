"""The SGLang releases kvcheck models, and how a side's release is found.

* ``kvcheck.release.version``: the one ``Version`` type and its one comparison
  (``0.5.0rc2 < 0.5.0 < 0.5.0.post1 < 0.5.1``);
* ``kvcheck.release.manifest``: the modeled releases, the newest written once
  (``NEWEST``), and per subsystem (flags, startup, bootstrap, decision, states, explain)
  which releases kvcheck has verified against that release's own code;
* ``kvcheck.release.window``: a side's releases (its clues intersected with the releases
  whose flag parser accepts its flags), the pair's candidate releases, and the grouping of
  releases that behave alike (a pair is decided once per distinct behaviour).

Standard library only on import (cold path).
"""

from kvcheck.release.manifest import NEWEST
from kvcheck.release.version import Version, parse_version, version_key

__all__ = ["NEWEST", "Version", "parse_version", "version_key"]
