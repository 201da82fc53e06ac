"""A2Eval: agentic benchmark curation (Data Agent) and code-synthesising evaluation (Eval Agent).

Modules:
- :mod:`.pool`        benchmark pools from JSONL / Parquet / lmms-eval task exports, schema check
- :mod:`.procedural`  the shipped procedural embodied-reasoning pool (rendered scenes + ground truth)
- :mod:`.subjects`    the embedded pool subjects (image-reading solvers with capability profiles)
- :mod:`.llm`         role -> LLM wiring (per-role config, call cache, offline rule-based stand-in)
- :mod:`.data_agent`  Proposer / Reviewer loop with memory and stopping rule
- :mod:`.assigner`    N_v voters, majority vote with tie rule, agreement and Fleiss' kappa
- :mod:`.sampling`    embeddings, per-dimension k-means, centroid-nearest examples, cluster-mass weights
- :mod:`.sandbox`     run untrusted code under bubblewrap: namespaces, read-only view, tmpfs, seccomp, rlimits
- :mod:`.scorers`     reference scorers (multiple choice, numeric tolerance, point-in-mask, exact match)
- :mod:`.eval_agent`  Evaluator / Scorer roles that synthesise and repair evaluation code
- :mod:`.lmms_export` export a curated suite as an lmms-eval task (YAML + utils.py)
- :mod:`.fidelity`    rank agreement with bootstrap intervals, random and k-center baselines, cost
"""
