"""embeval.runs: run specs, the results store, sharding and resume, local and Ray backends, reports.

>>> from embeval.runs import run, resume, status
>>> summary = run("config/runs/quality-smoke.yaml", "runs/quality")   # validated before any work starts
>>> resume("runs/quality")                                            # skips done units, retries failed ones

See docs/runs.md. Heavy packages (ray, pandas, matplotlib) load only when used.
"""
from embeval.runs.export import export_parquet, results_frame
from embeval.runs.plan import Plan, plan_run
from embeval.runs.registry import (EVALUATORS, Evaluator, EvaluatorParams, ReportSection, get_evaluator, list_evaluators,
                                   register_evaluator)
from embeval.runs.report import build_report
from embeval.runs.runner import RunSummary, load_run_spec, open_store, resume, run, status
from embeval.runs.spec import BackendSpec, ItemsSpec, RunSpec, SubjectEntry, load_spec, parse_spec, spec_hash
from embeval.runs.store import ResultsStore
from embeval.runs.units import Unit, UnitResult, assign_shards, select_shard

__all__ = [
    "EVALUATORS", "BackendSpec", "Evaluator", "EvaluatorParams", "ItemsSpec", "Plan", "ReportSection", "ResultsStore", "RunSpec", "RunSummary",
    "SubjectEntry", "Unit", "UnitResult", "assign_shards", "build_report", "export_parquet", "get_evaluator", "list_evaluators",
    "load_run_spec", "load_spec", "open_store", "parse_spec", "plan_run", "register_evaluator", "resume", "results_frame",
    "run", "select_shard", "spec_hash", "status",
]
