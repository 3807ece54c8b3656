"""What a fair kernel may err by: each op's reduction length and term norms (the accumulation rules; the
families' terms in terms/). Imports only ``common``."""
