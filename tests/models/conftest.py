"""The real-model group (`nox -s tests_models`) needs timm and transformers (the `models`
dependency group). Without them it is not collected, so the default test run needs neither."""

import importlib.util

collect_ignore_glob = (
    []
    if all(importlib.util.find_spec(name) for name in ("timm", "transformers", "yaml"))
    else ["*.py"]
)
