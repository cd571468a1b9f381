"""Where users meet ndif-opt: the command line, directories, configuration, notebooks, the editor server."""
