"""`python -m engine.app`: the `planloom` command."""

from engine.app.main import main

raise SystemExit(main())
