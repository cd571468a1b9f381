"""Running the passes: the pipeline, windows of a long file, cells and IPython lines, processes, the prefilter."""
