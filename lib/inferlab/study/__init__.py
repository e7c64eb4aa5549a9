"""The validation study: does the simulator predict a live server? Kept apart from the simulator
(serving.engine, simulate, policies, kv, metrics, workload, steptime), which never imports it.

- `validate`: the pipelines of the project's own loop and of transformers, from calibration to the
  judged prediction, and `validate`, which runs the pipeline of the engine asked for; vLLM's
  pipeline is `engines.vllm_validate`.
- `records`: what a validation record holds and how the stored records are read; `reports`: the
  tables and sentences made from records (vLLM's: `engines.vllm_report`).
- `checks`: the simulation set-up a validation shares (`SimSetup`), the comparison against the
  bounds, the replay of the live step times and the sensitivity to a uniform step-time error.
- the measured step times: `profiled` (an operator profile), `fitted` (a fit to an engine's timed
  steps), `bracketing` (calibrations before and after each rate), `hostspeed` (the in-run probe).
- `live` and `engines`: the live servers (our loop, transformers' continuous batching, vLLM).

The study's own words (bracket, probe-tracked, knife-edged, disturbed, ...) are defined once in
docs/glossary.md; the runs behind its settings are in docs/lab-notes.md.
"""
