"""Serving models: a discrete-event simulation of a continuous-batching engine (aggregated serving)."""

from servelab.predict.serving.aggregated import AggregatedEstimate, SimResult, estimate_aggregated, simulate
from servelab.predict.serving.pricing import StepPricer
from servelab.predict.serving.workload import SpecDecoding, Workload

__all__ = [
    "AggregatedEstimate",
    "SimResult",
    "SpecDecoding",
    "StepPricer",
    "Workload",
    "estimate_aggregated",
    "simulate",
]
