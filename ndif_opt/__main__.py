"""``python -m ndif_opt``: the command line, for environments without the script on PATH."""

from ndif_opt.frontends.cli import main

if __name__ == "__main__":
    main()
