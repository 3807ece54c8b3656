"""Collectives judged from a multi-rank dump: each rank's recorded output of one ``Distributed.*`` call against
the float64 golden of every participating rank's recorded inputs (calls.py reads a call, definitions.py says
what each collective computes, ranks.py finds the other ranks' entries, run.py judges one rank's case)."""
