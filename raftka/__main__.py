import sys

from raftka.cli import main

sys.exit(main())
