"""``python tests/pinned_kvcheck.py preflight ...``: kvcheck with ``--sglang-version``
(default 0.5.23, else ``KVCHECK_TEST_RELEASE``) after the subcommand.

The handed cases (``../shared/cases``) state what the SGLang 0.5.23 runtime does with each
pair, while their ``--config`` files name no release; ``../shared/tools/run-cases --kvcheck``
runs them through this wrapper so each is decided on the release it states."""

import os
import sys

from kvcheck.cli import main

if __name__ == "__main__":
    argv = sys.argv[1:]
    if argv and argv[0] == "preflight":
        argv = [argv[0], "--sglang-version", os.environ.get("KVCHECK_TEST_RELEASE", "0.5.23"), *argv[1:]]
    sys.argv = ["kvcheck", *argv]
    main()
