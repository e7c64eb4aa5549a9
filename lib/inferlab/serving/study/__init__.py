"""The validation study: does the simulator predict a live server? Kept apart from the simulator
(serving.engine, simulate, policies, kv, metrics, workload, steptime), which never imports it.

- `validate`: one pipeline per live engine (the project's loop, transformers, vLLM) from
  calibration to the judged prediction, and the records it writes and reads.
- `checks`: the simulation set-up a validation shares (`SimSetup`), the comparison against the
  bounds, the replay of the live step times and the sensitivity to a uniform step-time error.
- the measured step times: `profiled` (an operator profile), `fitted` (a fit to an engine's timed
  steps), `bracketing` (calibrations before and after each rate), `hostspeed` (the in-run probe).
- `live` and `engines`: the live servers (our loop, transformers' continuous batching, vLLM).

The study's own words (bracket, probe-tracked, knife-edged, disturbed, ...) are defined once in
docs/glossary.md; the runs behind its settings are in docs/lab-notes.md.
"""
