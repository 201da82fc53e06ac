import sys

from embeval_cli import main

sys.exit(main())
