import sys

from inferlab.exercises.cli import main

sys.exit(main())
