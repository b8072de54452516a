"""Deployment plans above the rewriter: the closed-form plan estimate and the plan search.

(The plan model and its loading still live in :mod:`xsim_trace.rewrite.plan`.)
"""
