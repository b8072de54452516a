"""Evaluating deployment plans above the replay: a rewritten rank set replayed on the engine
(:mod:`.engine_times`), heterogeneity metrics from its per-node times (:mod:`.metrics`), and the
table of plans / strategies / partitions (:mod:`.compare`; ``--quick`` rows come from
:mod:`xsim_trace.plan.closed_form`, no replay)."""
