"""The release of ndif-opt, as pyproject.toml states it: ``ndif_opt.__version__``, and what
``ndif-opt --version`` prints from a checkout that is not installed (where the installed
distribution's metadata cannot say). A module of its own, at the bottom of the layers, so
that the command line reads it without importing the package's ``__init__`` above it."""

VERSION = "0.1.0"
