"""servelab: LLM-serving performance in one toolkit (predict, collect, benchmark, recipes, results)."""

__version__ = "0.1.0"
