"""Shipped test helpers for people who build on tpelastic.

``tpelastic.testing.store_contract`` checks that a KeyValueStore adapter keeps the port's
contract: plain ``check_*`` functions and a hypothesis machine comparing it with MemoryStore.
Importing the machine factory needs ``hypothesis`` (the ``test`` extra).
"""
