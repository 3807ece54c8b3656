"""Reading msprobe dumps: where they are, each entry's place in dump.json, the case records, argument decoding,
tensors made to fit statistics, random ops and what the device recorded. Imports ``ops``, ``bounds``, ``config``,
``precision`` and ``common``; never runs an op."""
