"""The operator's tools: the ``kts`` command (click; entry point ``rsm.cli.main:main``) and its commands (keys,
browse, scrub, config_check, demo, config_docs), the one configuration source they share (settings), the
``.properties`` reader and the local emulators of ``kts demo --backend``. The top layer: it may import every
other package."""
