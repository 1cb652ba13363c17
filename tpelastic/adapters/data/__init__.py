"""Data utilities for training loops under an elastic world: sampler, cycling, env, net, macros."""
