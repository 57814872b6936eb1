"""Text appended to (or written into) a third-party test tree to point it at oxiedge.

These modules are never imported by oxiedge's own test run; ``run_suites.py`` copies their
text into the unpacked sdist in the cache directory. Being appended to other modules, they
cannot open with ``from __future__ import annotations`` (only legal as a module's first
statement); their annotations are ones Python 3.11 evaluates at run time.
"""
