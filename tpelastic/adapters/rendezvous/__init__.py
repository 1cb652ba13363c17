"""The rendezvous API's plain parts: errors, parameters, results, the handler interface, the
backend registry and the static backend. The dynamic handler builds on these."""
