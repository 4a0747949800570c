"""`python -m repro_serving`: the `repro` command."""

from repro_serving.builder.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
