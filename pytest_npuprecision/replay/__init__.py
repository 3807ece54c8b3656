"""Replaying one call (a ``prepared.PreparedCall``): its sides (device under test, golden, baseline) prepared and run forward and backward,
the error bounds that need the golden, the golden's spread under input rounding, the memory budget and the thread
policy. Imports ``dump``, ``backends``, ``ops`` and everything below them."""
