"""The rendezvous protocol, pure: key layout, records, ranks, liveness, and the join machine."""
