"""Deadlines for blocks of worker code, enforced by a server that kills the late worker."""
