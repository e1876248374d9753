"""``python -m devboxes_sdk``: the ``devbox`` command, for a ``ProxyCommand`` that must
not depend on what the shell's PATH finds."""

from devboxes_sdk.cli import main

raise SystemExit(main())
