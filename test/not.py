"""`not CMD...`: succeed iff CMD exits with a non-zero status that is not a signal.

Like LLVM's `not`, a crash (death by signal) is a failure, so tests of bad
input prove the tool exits 1 with a diagnostic, never crashes.
"""

import subprocess
import sys

rc = subprocess.call(sys.argv[1:])
if rc < 0:
    sys.stderr.write(f"not: command crashed with signal {-rc}\n")
    sys.exit(2)
sys.exit(0 if rc != 0 else 1)
