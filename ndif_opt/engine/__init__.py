"""Running the passes: the pipeline, windows of a long file, processes, the prefilter."""
