"""Entry point for ``python -m relay``."""

from relay.commands import main

if __name__ == "__main__":
    raise SystemExit(main())
