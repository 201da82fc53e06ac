"""``python -m embeval.robot.ur_emulator ARGS``: the UR emulator (the arguments of ``embeval ur-emulator``)."""
import sys

from embeval.robot.ur_emulator.command import main

sys.exit(main())
