"""The options of ``oxiedge serve``, one declaration each (``declare.py``), by area.

``oxiedge.config.Config`` is the union of the area classes; ``kinds.py`` holds the parsers.
"""
