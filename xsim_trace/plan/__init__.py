"""Deployment plans: the model (:mod:`.model`, :mod:`.model_spec`), reading (:mod:`.parse`), checks
(:mod:`.validate`, :mod:`.memory`), where ranks live (:mod:`.placement`), the arithmetic of resharding
(:mod:`.reshard`), layer-aware DP intervals (:mod:`.dp_intervals`), schedules (:mod:`.schedules`),
layer partitioning (:mod:`.layer_split` the split arithmetic, :mod:`.partition` a plan's partition
step, by evaluation), the one closed form (:mod:`.stage_cost`, :mod:`.closed_form`) and the search
(:mod:`.space`, :mod:`.search`, :mod:`.document`).  Graph building is :mod:`xsim_trace.rewrite`,
replay-based evaluation :mod:`xsim_trace.evaluate`."""
