"""Sinks: where events and metrics go (null, console, logging, JSON lines, Prometheus)."""
