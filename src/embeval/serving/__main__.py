"""``python -m embeval.serving PROTOCOL ARGS``: a subject server (the arguments of ``embeval serve``)."""
import sys

from embeval.serving.command import main

sys.exit(main())
