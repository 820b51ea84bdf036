"""Entry point for ``python -m relay``."""

from relay.cli import main

if __name__ == "__main__":
    raise SystemExit(main())
