"""The local binlog and its disk threads: what survives a restart, a crash and a failing disk."""
