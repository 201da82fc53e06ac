"""Built-in evaluation kinds (registered lazily in :data:`embeval.runs.registry.EVALUATORS`)."""
