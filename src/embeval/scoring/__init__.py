"""embeval.scoring: cognition (text), decision (actions) and execution scores; correlation statistics.

See docs/scoring.md. Main entry points:
- :func:`embeval.scoring.cognition.cognition_scores` / :func:`~embeval.scoring.cognition.score_pairs`
- :func:`embeval.scoring.decision.decision_corpus` (the Decision scorer every module calls; names in
  :data:`~embeval.scoring.decision.OUTPUTS`)
- :func:`embeval.scoring.stats.correlations`, :func:`~embeval.scoring.stats.bootstrap_ci`,
  :func:`~embeval.scoring.stats.rank_agreement`
- :func:`embeval.scoring.jnd.jnd_groups`
"""
