"""What every layer shares: floating-point formats and math modes, the torch versions we support, memory
sizes and dump text as people read them, and the warning categories. Imports nothing else of the package."""
