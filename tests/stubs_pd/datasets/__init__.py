"""Stand-in for Hugging Face ``datasets`` in tests/sglang_pd_tests_worker.py only.

SGLang's ``sglang.test.test_utils`` imports its benchmark package, whose MMMU loader imports
``datasets`` at module level; the PD test recorder never loads a dataset, so every name
here raises if it is ever used."""


def __getattr__(name):
    def _unavailable(*args, **kwargs):
        raise RuntimeError(f"datasets.{name} is not available in kvcheck's PD test recorder")

    return _unavailable
