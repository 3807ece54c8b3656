"""The files a user points the harness at: rules and known-failures schemas, how a file is read with an error
that names it, and recorded baselines. Imports ``precision`` and ``common``."""
