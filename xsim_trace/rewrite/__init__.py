"""Graph surgery: per-rank Chakra traces for a deployment plan from per-layer templates
(:mod:`.rewriter`, with :mod:`.rings` and :mod:`.lcm_rings` for the DP collectives), heterogeneous
workloads for ``xsim generate --plan`` (:mod:`.hetero_generate`), retargeting a captured trace to other
devices (:mod:`.retarget`) and the trace / plan / cluster guard rails (:mod:`.guards`).  The plan
model, partitioning, closed form and search are :mod:`xsim_trace.plan`; replaying and measuring a
rewritten set is :mod:`xsim_trace.evaluate`."""
