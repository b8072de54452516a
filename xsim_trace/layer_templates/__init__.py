"""Per-layer templates: one layer's forward / backward compute and TP collectives (measured in a
trace, or the workload generator's ops timed on a device), from which the closed form prices a stage
and the rewriter builds one.  :mod:`.template` (the model and extraction from a trace),
:mod:`.per_stage` (which template a stage uses), :mod:`.generated` (one per device group and TP from
the generator), :mod:`.scaling` (op times on a stage's device and TP).  Not the workload
generator's rank templates (:mod:`xsim_trace.workload.templates`)."""
