"""The definitions document: a whole device's configuration as one JSON file.

``document.py`` builds it from what a data dir holds and checks a document field by field
(no I/O); ``plan.py`` compares a checked document with the current state (what an import
would change, refusing conflicts before anything changes); ``operation.py`` is the one
operation (``definitions.export`` / ``definitions.import``) the admin socket, the CLI and the
HTTP API share; ``state.py`` reads the state from a store and the access files (a running
server's or a stopped one's). ``docs/definitions.md`` describes the document.
"""
