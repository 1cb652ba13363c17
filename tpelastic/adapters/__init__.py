"""Adapters bind the pure core to the world: stores, processes, clocks, sinks."""
