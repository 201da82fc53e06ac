"""The default backend: units run in this process, one subject at a time (its model loaded once)."""
from __future__ import annotations

from itertools import groupby
from typing import Sequence

from embeval.runs.execute import SubjectRunner, units_per_call
from embeval.runs.units import Unit, batches


class LocalBackend:
    name = "local"

    def execute(self, plan, units: Sequence[Unit], on_results) -> None:
        spec = plan.spec
        size = units_per_call(plan.evaluator, spec.backend)  # batch_size; with num_envs > 1 a vectorised batch
        rank = {sid: i for i, sid in enumerate(plan.subjects)}
        ordered = sorted(units, key=lambda u: rank[u.subject])  # stable: plan order within a subject
        for subject_id, group in groupby(ordered, key=lambda u: u.subject):
            runner = SubjectRunner(plan.evaluator, spec, plan.subjects[subject_id], spec.backend.unit_timeout_s)
            try:
                for batch in batches(list(group), size):
                    on_results(list(zip(batch, runner.run(batch))))
            finally:
                runner.close()
