"""The local admin API: a Unix socket in the data dir speaking one JSON request per line."""
