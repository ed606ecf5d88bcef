"""The deployment planner behind `servelab plan`: search (aggregated and disaggregated), rank, explain,
report.

Modules, lowest first: request (what is asked), points (engine configs and simulated loads), context (the
search's resolved specs), configs (which parallel splits can serve), agg and disagg (the two searches),
pareto, candidates (the plan as printed and saved), explain, report (HTML), search (make_plan, which ties
them together), export (the picks as a recipe, a launch script and a Kubernetes manifest).
"""

from servelab.predict.plan.candidates import Candidate, Plan, PoolConfig
from servelab.predict.plan.explain import explain
from servelab.predict.plan.request import Mode, PlanError, PlanRequest, SlaStat
from servelab.predict.plan.search import make_plan

__all__ = [
    "Candidate",
    "Mode",
    "Plan",
    "PlanError",
    "PlanRequest",
    "PoolConfig",
    "SlaStat",
    "explain",
    "make_plan",
]
