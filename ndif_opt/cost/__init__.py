"""The cost model's parts: shapes of values, the model registry, the walk's tables."""
