"""The floor everything stands on: input checks, units, atomic file writes, plain-text tables and
the words that name a size. Imports nothing else of the library."""
