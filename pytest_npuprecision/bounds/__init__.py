"""What a fair kernel may err by: each op's reduction length and term norms (the accumulation rules) and every
op family's sensitivities. Imports ``precision`` and ``common``."""
