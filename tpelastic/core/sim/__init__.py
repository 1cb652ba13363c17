"""Deterministic simulation of many nodes running the real core machines in virtual time."""
