"""Suite-wide settings."""

from __future__ import annotations

import os

# A CPU schedule that fails to apply leaves the module on the naive loops
# (correct, slow, and silent: the transform script stops at the failing op,
# so every op of the module loses its schedule). The suite raises instead.
os.environ["AUTODIFF_STRICT_SCHEDULES"] = "1"
