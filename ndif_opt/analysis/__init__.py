"""Facts about a script, computed once per version of its tree: models, blocks, names, effects, regions."""
