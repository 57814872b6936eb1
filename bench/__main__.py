"""``python -m bench`` entry point."""

from __future__ import annotations

from bench.run import main

main()
