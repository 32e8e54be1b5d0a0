"""``python -m codea1`` runs the command-line interface."""

from codea1.cli import main

raise SystemExit(main())
