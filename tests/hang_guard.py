"""How long a subprocess or a notebook cell of a test may run before the test calls it hung: a guard
against a hang, never a time limit (tests must pass with every core busy, which slows a run
several-fold). A module of its own, not conftest: `tests/browser/` has a conftest too, so
`from conftest import ...` would reach whichever pytest imported first."""
HANG_S = 1800
