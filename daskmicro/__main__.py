"""``python -m daskmicro``: the same command line as ``daskmicro``."""

from .cli import main

raise SystemExit(main())
