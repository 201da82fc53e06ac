import sys

from embeval.cli import main

sys.exit(main())
