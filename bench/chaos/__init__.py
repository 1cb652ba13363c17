"""A fault-injection harness: real agents of a launcher, a seeded schedule of faults, five checks.

See ``bench/chaos_bench.py`` for the command and docs/benchmarks-chaos.md for what it measures.
"""
